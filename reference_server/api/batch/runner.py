"""The batch job runner: one asyncio task that moves jobs through their statuses and feeds
their lines to the engine as capacity frees.

Owns each unfinished job's life in memory (validating -> in_progress -> finalizing ->
completed; -> expired; cancelling -> cancelled; failed when the input is gone), the in-flight
bound (`BatchLimits.inflight_bound` lines of all jobs in the engine at once, so a 50,000-line
job never queues 50,000 sequences), retries of lines the engine could not take yet, group
commits of finished lines, and recovery: jobs found unfinished at start resume where their
recorded results stop. Input lines are read lazily; a result is recorded once per line number,
so a line run before a SIGKILL and again after it appears once. While the server drains it
feeds nothing; lines still running then are aborted unrecorded and run next start. It knows
nothing about HTTP; `LineExecutor` serves lines, `BatchStore` keeps state.

Why the in-flight bound is here and not in the scheduler: it is flow control between a job's
file and the engine, not a scheduling rule. The lines wait in the job's file (read lazily,
recorded once each, resumed after a restart), not in the engine's queues, and only this runner
knows which requests belong to a job; once fed, a line is an ordinary request of the
`batch_api_priority` class, and the scheduler treats it as any other (interactive first, the
class's `max_waiting` bound, preemption). The bound only keeps a 50,000-line job from becoming
50,000 queued sequences; docs/server.md, "Feeding the engine".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .job_stats import JobStats
from .limits import BatchLimits
from .lines import (
    Envelope,
    LineError,
    LineExecutor,
    LineOutcome,
    NotNow,
    endings,
    error_record,
    iter_lines,
    read_envelope,
    refusals,
)
from .result_log import ResultLog
from .store import BatchStore

__all__ = ["BatchRunner"]

logger = logging.getLogger("reference_server.api.batch")

DbCall = Callable[..., Awaitable[Any]]
_RETRY_MIN_SECONDS = 0.05
_RETRY_MAX_SECONDS = 1.0
_IDLE_WAKE_SECONDS = 5.0
_BOUND_REFRESH_SECONDS = 0.5
_STEP_RETRY_SECONDS = 5.0
_ENDINGS = {
    "expired": ("batch_expired", "the request was not run before the completion window ended"),
    "cancelled": ("batch_cancelled", "the request was not run: the batch was cancelled"),
}


@dataclass(eq=False)
class _Job:
    id: str
    endpoint: str
    path: Path
    expires_at: float
    total: int
    phase: str  # "validate" | "running" | "finish"
    end_status: str | None = None  # "expired" | "cancelled" once decided
    busy: asyncio.Task[None] | None = None
    done: set[int] = field(default_factory=set)
    lines: Iterator[tuple[int, bytes]] | None = None
    retry: deque[tuple[float, Envelope]] = field(default_factory=deque)
    inflight: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    removed: bool = False
    hold_until: float = 0.0  # after a failed step: no retry before this (time.monotonic)


class BatchRunner:
    def __init__(
        self, *, store: BatchStore, db: DbCall, executor: LineExecutor, limits: BatchLimits,
        engine: Any, is_draining: Callable[[], bool], stats: JobStats,
    ) -> None:  # fmt: skip
        self._store = store
        self._db = db
        self._executor = executor
        self._limits = limits
        self._engine = engine
        self._is_draining = is_draining
        self.stats = stats
        self._jobs: dict[str, _Job] = {}
        self._num_inflight = 0
        self._results = ResultLog(functools.partial(db, store.record_results))
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._bound_value = 1
        self._bound_read_at = -_BOUND_REFRESH_SECONDS
        self._closing = False
        self._counts_stale = False  # a job changed status outside the runner (created, cancel)
        stats.line_gauges = self.line_gauges

    # -- lifetime ---------------------------------------------------------------------------

    async def start(self) -> None:
        for row in await self._db(self._store.unfinished_batches):
            self._adopt(row)
        if self._jobs:
            logger.info("batch jobs resumed: %s", ", ".join(self._jobs))
        await self._refresh_counts()
        loop = asyncio.get_running_loop()
        for work in (self._loop(), self._results.run(), self._sweep_loop()):
            self._tasks.append(loop.create_task(work))

    async def close(self) -> None:
        """Stop: cancel running lines (they run again next start), commit what finished."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        line_tasks = [t for job in self._jobs.values() for t in job.inflight.values()]
        busy = [job.busy for job in self._jobs.values() if job.busy is not None]
        for task in line_tasks + busy:
            task.cancel()
        await asyncio.gather(*self._tasks, *line_tasks, *busy, return_exceptions=True)
        await self._results.flush()

    def submitted(self, row: dict[str, Any]) -> None:
        """A job was created (status validating)."""
        self._adopt(row)
        self._counts_stale = True
        self._wake.set()

    def cancel(self, batch_id: str) -> None:
        """The job's status is now cancelling: abort its lines and end it."""
        job = self._jobs.get(batch_id)
        if job is not None and job.end_status is None:
            job.end_status = "cancelled"
        self._counts_stale = True
        self._wake.set()

    def _adopt(self, row: dict[str, Any]) -> None:
        # A job found in_progress at start is validated again: that records nothing twice and
        # reloads which lines are done.
        started = row["status"] in ("validating", "in_progress")
        self._jobs[row["id"]] = _Job(
            id=row["id"], endpoint=row["endpoint"], path=self._store.path_of(row["input_file_id"]),
            expires_at=row["expires_at"], total=row["total"],
            phase="validate" if started else "finish",
            end_status="cancelled" if row["status"] == "cancelling" else None,
        )  # fmt: skip

    # -- the loop ---------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            now = time.time()
            for job in list(self._jobs.values()):
                try:
                    self._advance(job, now)
                except Exception:  # one broken job must not stop the others
                    logger.exception("batch %s: advancing failed", job.id)
            self._feed()
            if self._counts_stale:
                self._counts_stale = False
                self._tasks.append(asyncio.ensure_future(self._refresh_counts()))
                self._tasks = [task for task in self._tasks if not task.done()]
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._sleep_seconds(now))

    def _sleep_seconds(self, now: float) -> float:
        wake = now + _IDLE_WAKE_SECONDS
        monotonic = time.monotonic()
        for job in self._jobs.values():
            if job.end_status is None:
                wake = min(wake, job.expires_at)
            if job.retry:
                wake = min(wake, now + (job.retry[0][0] - monotonic))
        return max(0.0, wake - now)

    def _spawn(self, job: _Job, work: Awaitable[None]) -> None:
        job.busy = asyncio.ensure_future(work)
        job.busy.add_done_callback(lambda _: self._wake.set())

    def _advance(self, job: _Job, now: float) -> None:
        if job.busy is not None:
            if not job.busy.done():
                return
            if not job.busy.cancelled() and job.busy.exception() is not None:
                logger.error("batch %s failed a step", job.id, exc_info=job.busy.exception())
                job.hold_until = time.monotonic() + _STEP_RETRY_SECONDS
            job.busy = None
        if time.monotonic() < job.hold_until:
            return
        if job.removed:
            self._jobs.pop(job.id, None)
            return
        if job.end_status is None and job.phase != "finish" and now >= job.expires_at:
            job.end_status = "expired"
        if job.phase == "validate":
            if job.end_status is None:
                self._spawn(job, self._validate(job))
                return
            job.phase = "finish"
        if job.phase == "running":
            if job.end_status is not None:
                for task in job.inflight.values():
                    task.cancel()  # closes the engine stream: the request is aborted
                job.retry.clear()
                job.lines = None
                job.phase = "finish"
            elif job.lines is None and not job.inflight and not job.retry:
                job.phase = "finish"
            else:
                return
        if job.phase == "finish" and not job.inflight:
            self._spawn(job, self._finish(job))

    def _bound(self) -> int:
        # Re-read now and then: the settings can change live, and reading them copies them.
        now = time.monotonic()
        if now >= self._bound_read_at + _BOUND_REFRESH_SECONDS:
            self._bound_read_at = now
            self._bound_value = self._limits.inflight_bound(self._engine.get_batching())
        return self._bound_value

    def _feed(self) -> None:
        if self._closing or self._is_draining() or not self._engine.is_alive():
            return
        bound = self._bound()
        if self._num_inflight >= bound:
            return
        for job in self._jobs.values():  # oldest job first
            if job.phase != "running" or job.end_status is not None:
                continue
            while self._num_inflight < bound:
                envelope = self._next_envelope(job)
                if envelope is None:
                    break
                self._num_inflight += 1
                task = asyncio.ensure_future(self._run_line(job, envelope))
                task.add_done_callback(functools.partial(self._line_done, job, envelope.line))
                job.inflight[envelope.line] = task
            if self._num_inflight >= bound:
                return

    def _next_envelope(self, job: _Job) -> Envelope | None:
        if job.retry and job.retry[0][0] <= time.monotonic():
            return job.retry.popleft()[1]
        while job.lines is not None:
            item = next(job.lines, None)
            if item is None:
                job.lines = None
                self._wake.set()  # the job may be done already: let the loop look
                break
            line, raw = item
            if line in job.done or line in job.inflight:
                continue
            try:
                return read_envelope(
                    raw, line, endpoint=job.endpoint, max_line_bytes=self._limits.max_line_bytes
                )
            except LineError as exc:  # validation recorded it; only a changed file gets here
                self._record(job, line, LineOutcome(
                    ok=False, record=error_record(line, exc.custom_id, exc.code, exc.message)
                ))  # fmt: skip
        return None

    async def _run_line(self, job: _Job, envelope: Envelope) -> None:
        try:
            outcome = await self._executor.run(job.endpoint, envelope)
        except NotNow as exc:
            delay = exc.retry_after_seconds or _RETRY_MIN_SECONDS
            delay = min(max(delay, _RETRY_MIN_SECONDS), _RETRY_MAX_SECONDS)
            job.retry.append((time.monotonic() + delay, envelope))
            return
        except Exception:
            logger.exception("batch %s line %d failed", job.id, envelope.line)
            outcome = LineOutcome(ok=False, record=error_record(
                envelope.line, envelope.custom_id, "internal_error", "the server failed this line"
            ))  # fmt: skip
        self._record(job, envelope.line, outcome)

    def _line_done(self, job: _Job, line: int, task: asyncio.Task[None]) -> None:
        # A done callback, not a finally: a task cancelled before it started never runs its
        # body. A cancelled line (job ended, or the server stopping) records nothing.
        self._num_inflight -= 1
        job.inflight.pop(line, None)
        if task.cancelled() or job.lines is None or job.retry:
            self._wake.set()  # the job may be done, or a retry is due: the loop decides
        if not task.cancelled():
            self._feed()  # refill the freed slot now, without a loop round trip

    def _record(self, job: _Job, line: int, outcome: LineOutcome) -> None:
        job.done.add(line)
        self._results.add(
            (job.id, line, outcome.ok, outcome.record, outcome.prompt_tokens,
             outcome.output_tokens)
        )  # fmt: skip
        self.stats.count_line(ok=outcome.ok, output_tokens=outcome.output_tokens)

    # -- job phases (each runs as the job's busy task) --------------------------------------

    async def _validate(self, job: _Job) -> None:
        try:
            total, refused = await self._db(
                _validate_file, self._store, job, self._limits.max_line_bytes
            )
        except FileNotFoundError:
            error = {"code": "file_not_found", "message": "the input file no longer exists",
                     "param": "input_file_id", "line": None}  # fmt: skip
            await self._db(
                self._store.update_batch, job.id, status="failed", failed_at=time.time(),
                errors=orjson.dumps({"object": "list", "data": [error]}).decode(),
            )  # fmt: skip
            job.removed = True
            await self._refresh_counts()
            return
        self.stats.count_failed(refused)
        job.total = total
        job.done = await self._db(self._store.done_lines, job.id)
        job.lines = iter_lines(job.path)
        job.phase = "running"
        await self._refresh_counts()

    async def _finish(self, job: _Job) -> None:
        await self._results.flush()
        now = time.time()
        if job.end_status is None:
            moved = await self._db(
                self._store.update_batch, job.id, status="finalizing", finalizing_at=now,
                only_from=("in_progress",),
            )  # fmt: skip
            if not moved:
                row = await self._db(self._store.get_batch, job.id) or {}
                if row.get("status") == "cancelling":  # landed after the last line finished
                    job.end_status = "cancelled"
        values: dict[str, Any]
        if job.end_status is None:
            values = {"status": "completed", "completed_at": time.time()}
        else:
            code, message = _ENDINGS[job.end_status]
            total, ended = await self._db(_fill_remaining, self._store, job, code, message)
            self.stats.count_failed(ended)
            values = {"status": job.end_status, f"{job.end_status}_at": time.time()}
            if job.total == 0:
                values["total"] = total
        await self._db(
            self._store.finalize, job.id, retention_seconds=self._limits.retention_seconds,
            **values,
        )  # fmt: skip
        logger.info("batch %s %s", job.id, values["status"])
        job.removed = True
        await self._refresh_counts()

    # -- persistence ------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        interval = min(60.0, max(0.25, self._limits.retention_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self._db(self._store.sweep, time.time(), self._limits.retention_seconds)
                await self._refresh_counts()
            except Exception:
                logger.exception("batch retention sweep failed")

    async def _refresh_counts(self) -> None:
        self.stats.set_job_counts(await self._db(self._store.count_by_status))

    def line_gauges(self) -> tuple[int, int, int]:
        """(lines in the engine, lines of running jobs not fed yet, the bound), at scrape time."""
        pending = sum(
            max(0, job.total - len(job.done) - len(job.inflight))
            for job in self._jobs.values()
            if job.phase == "running"
        )
        return self._num_inflight, pending, self._bound()


# -- work run on the store's thread ----------------------------------------------------------


def _validate_file(store: BatchStore, job: _Job, max_line_bytes: int) -> tuple[int, int]:
    """Record every line that cannot run (with its line number) and mark the job in_progress.
    Returns (lines in the file, refusals newly recorded); run again after a restart it records
    nothing twice."""
    total, refused = refusals(job.path, endpoint=job.endpoint, max_line_bytes=max_line_bytes)
    added = store.record_results((job.id, line, False, record, 0, 0) for line, record in refused)
    store.update_batch(
        job.id, status="in_progress", in_progress_at=time.time(), total=total,
        only_from=("validating",),
    )  # fmt: skip
    return total, added


def _fill_remaining(store: BatchStore, job: _Job, code: str, message: str) -> tuple[int, int]:
    """Record an ending (expired / cancelled) for every line without a result; returns (lines
    in the file, endings newly recorded)."""
    total, ended = endings(job.path, store.done_lines(job.id), code, message)
    return total, store.record_results((job.id, line, False, rec, 0, 0) for line, rec in ended)
