"""The progress display of a load run: a live line on a terminal (rich), plain lines otherwise.

Owns formatting what the collector has seen so far (elapsed, sent, ok/errors, TTFT p50/p99) and
the final summary line. It reads the collector; it does not compute metrics beyond percentiles
(`loadgen.percentile`) and does not decide anything.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from loadgen.percentile import percentile

__all__ = ["Progress", "status_line"]

_PLAIN_EVERY_SECONDS = 5.0


def status_line(
    *, elapsed_seconds: float, total_seconds: float, counts: dict[str, int], ttfts: list[float]
) -> str:
    done = sum(counts.values())
    errors = done - counts.get("ok", 0)
    recent = ttfts[-2000:]
    p50, p99 = percentile(recent, 50), percentile(recent, 99)
    ttft = (
        f"TTFT p50 {p50 * 1000:.1f} ms p99 {p99 * 1000:.1f} ms"
        if p50 is not None and p99 is not None
        else "TTFT -"
    )
    return (
        f"{elapsed_seconds:6.1f}/{total_seconds:.0f} s  done {done}  ok {counts.get('ok', 0)}"
        f"  errors {errors}  {ttft}"
    )


class Progress:
    def __init__(self, collector: Any, *, stream: Any = None) -> None:
        self.collector = collector
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def _line(self) -> str:
        c = self.collector
        return status_line(
            elapsed_seconds=max(time.monotonic() - c.t0, 0.0),
            total_seconds=c.spec.schedule.duration_seconds,
            counts=c.counts_by_status,
            ttfts=c.ttfts,
        )

    def loop(self) -> None:
        import gevent

        if self.tty:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            console = Console(file=self.stream)
            with Live(Text(""), console=console, auto_refresh=False, transient=True) as live:
                while True:
                    live.update(Text(self._line()), refresh=True)
                    gevent.sleep(0.5)
        else:
            while True:
                gevent.sleep(_PLAIN_EVERY_SECONDS)
                with contextlib.suppress(OSError):  # a full disk under load.log: no line
                    print(f"loadgen: {self._line()}", file=self.stream, flush=True)

    def final(self, load: dict[str, Any]) -> None:
        if not load:
            return
        lag = load["schedule_lag_seconds"]["p99"] * 1000
        valid = (
            "valid"
            if load["measurement_valid"]
            else "INVALID: " + "; ".join(load["invalid_reasons"])
        )
        target = load["target_rate_rps"]
        rate = f"{load['achieved_rate_rps']:.2f} req/s" + (
            f" (target {target:.2f})" if target is not None else ""
        )
        with contextlib.suppress(OSError):  # a full disk under load.log: no summary line
            self._final_line(load, rate, lag, valid)

    def _final_line(self, load: dict[str, Any], rate: str, lag: float, valid: str) -> None:
        print(
            f"loadgen: {load['profile']} {load['ended']}: sent {load['sent_requests']}/"
            f"{load['planned_requests']}, {rate}, by status {load['counts_by_status']}, "
            f"lag p99 {lag:.2f} ms, measurement {valid}",
            file=self.stream,
            flush=True,
        )
