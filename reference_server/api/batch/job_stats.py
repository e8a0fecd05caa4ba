"""Batch job numbers for /metrics: jobs by status, job lines finished and failed, lines in the
engine and waiting to be fed, job output tokens (total and per second).

Owns the counters the runner moves and a Prometheus collector that reads them at scrape time
(registered on the server's own registry, next to the engine's). The engine-side queue of the
batch class stays `batchgate_num_requests_waiting{priority="batch"}` (api/metrics.py). It knows
nothing about how jobs run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .store import STATUSES

__all__ = ["JobStats"]

PREFIX = "batchgate_batch_"
_RATE_WINDOW_SECONDS = 10.0


class JobStats:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.jobs_by_status: dict[str, int] = dict.fromkeys(STATUSES, 0)
        self.lines_completed_total = 0
        self.lines_failed_total = 0
        self.output_tokens_total = 0
        # (lines in the engine, lines waiting to be fed, the in-flight bound), read at scrape
        # time from the runner that owns them.
        self.line_gauges: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0)
        self._recent: deque[tuple[float, int]] = deque()

    def count_line(self, *, ok: bool, output_tokens: int) -> None:
        if ok:
            self.lines_completed_total += 1
        else:
            self.lines_failed_total += 1
        if output_tokens:
            self.output_tokens_total += output_tokens
            self._recent.append((self._clock(), output_tokens))

    def count_failed(self, num_lines: int) -> None:
        """Lines refused before running (bad envelope) or ended unrun (expired, cancelled)."""
        self.lines_failed_total += num_lines

    def set_job_counts(self, counts: dict[str, int]) -> None:
        self.jobs_by_status = {status: counts.get(status, 0) for status in STATUSES}

    def output_tokens_per_second(self) -> float:
        """Job output tokens over the last 10 s, per second."""
        horizon = self._clock() - _RATE_WINDOW_SECONDS
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        return sum(count for _, count in self._recent) / _RATE_WINDOW_SECONDS

    def collector(self) -> _JobCollector:
        return _JobCollector(self)


class _JobCollector:
    def __init__(self, stats: JobStats) -> None:
        self._stats = stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self._stats
        jobs = GaugeMetricFamily(
            PREFIX + "jobs", "Batch API jobs by status (kept ones).", labels=["status"]
        )
        for status in STATUSES:
            jobs.add_metric([status], stats.jobs_by_status.get(status, 0))
        yield jobs
        lines = CounterMetricFamily(
            PREFIX + "job_lines",
            "Batch job lines finished since start, by outcome (failed includes per-line errors, "
            "expired and cancelled lines).",
            labels=["outcome"],
        )
        lines.add_metric(["completed"], stats.lines_completed_total)
        lines.add_metric(["failed"], stats.lines_failed_total)
        yield lines
        inflight, pending, bound = stats.line_gauges()
        yield GaugeMetricFamily(
            PREFIX + "job_lines_inflight",
            "Batch job lines in the engine now (waiting or running).",
            value=inflight,
        )
        yield GaugeMetricFamily(
            PREFIX + "job_lines_pending",
            "Lines of running batch jobs not yet fed to the engine (the jobs' own queue).",
            value=pending,
        )
        yield GaugeMetricFamily(
            PREFIX + "job_max_inflight",
            "The in-flight bound: most batch job lines in the engine at once.",
            value=bound,
        )
        yield CounterMetricFamily(
            PREFIX + "job_output_tokens",
            "Output tokens generated for batch job lines.",
            value=stats.output_tokens_total,
        )
        yield GaugeMetricFamily(
            PREFIX + "job_output_tokens_per_second",
            "Batch job output tokens per second over the last 10 s.",
            value=stats.output_tokens_per_second(),
        )
