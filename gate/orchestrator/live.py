"""The live view of a running profile: a rich panel on a terminal, plain lines in CI.

Owns reading the files a profile is writing (the growing `requests.jsonl`, the last lines of
`scrapes.jsonl` and `gpu.jsonl`) into a `Snapshot` — progress, offered vs achieved rate, rolling
p99 TTFT, KV usage, memory, errors — and showing it. It reads only what was appended since the
last look (a byte offset per file), so a long run costs nothing extra. It judges nothing.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["LiveView", "RecordTail", "Snapshot"]

RATE_WINDOW_SECONDS = 10.0  # offered / achieved rates are over the last this-many seconds
ROLLING_REQUESTS = 200  # rolling p99 TTFT over the last this-many first tokens
PLAIN_EVERY_SECONDS = 5.0


class RecordTail:
    """Yields the complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return []  # not written yet
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for the next look
        records = []
        for line in lines:
            if line.strip():
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    records.append(obj)
        return records


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    profile: str
    index: int
    total: int
    elapsed_seconds: float
    duration_seconds: float | None
    done: int
    errors: int
    offered_rps: float | None
    achieved_rps: float | None
    ttft_p99_seconds: float | None
    kv_usage_ratio: float | None
    memory_bytes: float | None
    waiting: float | None

    def fields(self) -> list[tuple[str, str]]:
        def fmt(value: float | None, spec: str, scale: float = 1.0, unit: str = "") -> str:
            return "-" if value is None else f"{value * scale:{spec}}{unit}"

        progress = (
            f"{self.elapsed_seconds:.0f}/{self.duration_seconds:.0f} s"
            if self.duration_seconds
            else f"{self.elapsed_seconds:.0f} s"
        )
        return [
            ("elapsed", progress),
            ("done", str(self.done)),
            ("errors", str(self.errors)),
            (
                "offered->achieved",
                f"{fmt(self.offered_rps, '.1f')}->{fmt(self.achieved_rps, '.1f')} req/s",
            ),
            ("TTFT p99 (rolling)", fmt(self.ttft_p99_seconds, ".0f", 1000.0, " ms")),
            ("KV usage", fmt(self.kv_usage_ratio, ".0f", 100.0, "%")),
            ("queue", fmt(self.waiting, ".0f")),
            ("memory", fmt(self.memory_bytes, ".0f", 1 / 2**20, " MiB")),
        ]

    def line(self) -> str:
        parts = "  ".join(f"{k} {v}" for k, v in self.fields())
        return f"[{self.index}/{self.total}] {self.profile}  {parts}"

    def table(self) -> Table:
        table = Table(
            title=f"batchgate run - profile {self.index}/{self.total}: {self.profile}",
            show_header=False,
            expand=False,
        )
        table.add_column("what")
        table.add_column("value", justify="right")
        for key, value in self.fields():
            table.add_row(key, value)
        return table


class _ProfileState:
    def __init__(self, directory: Path) -> None:
        self.requests = RecordTail(directory / "requests.jsonl")
        self.scrapes = RecordTail(directory / "scrapes.jsonl")
        self.gpu = RecordTail(directory / "gpu.jsonl")
        self.planned: deque[float] = deque()
        self.ok_done: deque[float] = deque()
        self.ttfts: deque[float] = deque(maxlen=ROLLING_REQUESTS)
        self.done = 0
        self.errors = 0
        self.latest_t = 0.0  # newest record time (load process monotonic clock)
        self.kv: float | None = None
        self.waiting: float | None = None
        self.memory: float | None = None

    def update(self) -> None:
        for record in self.requests.read_new():
            self.done += 1
            if record.get("status") != "ok":
                self.errors += 1
            planned, done = record.get("planned_at"), record.get("done_at")
            if isinstance(planned, (int, float)):
                self.planned.append(float(planned))
                self.latest_t = max(self.latest_t, float(planned))
            if isinstance(done, (int, float)):
                self.latest_t = max(self.latest_t, float(done))
                if record.get("status") == "ok":
                    self.ok_done.append(float(done))
            first, sent = record.get("first_token_at"), record.get("sent_at")
            if isinstance(first, (int, float)) and isinstance(sent, (int, float)):
                self.ttfts.append(float(first) - float(sent))
        for scrape in self.scrapes.read_new():
            metrics = scrape.get("metrics") or {}
            if isinstance(metrics.get("kv_usage_ratio"), (int, float)):
                self.kv = float(metrics["kv_usage_ratio"])
            waiting = metrics.get("num_requests_waiting")
            if isinstance(waiting, dict):
                self.waiting = float(sum(waiting.values()))
            elif isinstance(waiting, (int, float)):
                self.waiting = float(waiting)
        for sample in self.gpu.read_new():
            if isinstance(sample.get("memory_used_bytes"), (int, float)):
                self.memory = float(sample["memory_used_bytes"])

    def rate(self, times: deque[float]) -> float | None:
        horizon = self.latest_t - RATE_WINDOW_SECONDS
        while times and times[0] < horizon:
            times.popleft()
        return len(times) / RATE_WINDOW_SECONDS if self.latest_t else None


class LiveView:
    """Shows one profile at a time; `refresh()` is cheap and may be called often."""

    def __init__(
        self,
        *,
        stream: IO[str] | None = None,
        tty: bool | None = None,
        plain_every_seconds: float = PLAIN_EVERY_SECONDS,
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(self.stream.isatty()) if tty is None else tty
        self.plain_every_seconds = plain_every_seconds
        self.console = Console(file=self.stream, highlight=False)
        self._live: Live | None = None
        self._state: _ProfileState | None = None
        self._meta: tuple[str, int, int, float | None] = ("", 0, 0, None)
        self._started = 0.0
        self._last_plain = 0.0

    def message(self, text: str) -> None:
        """A line above the live panel (or a plain line)."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def begin(
        self,
        *,
        profile: str,
        directory: Path,
        index: int,
        total: int,
        duration_seconds: float | None,
    ) -> None:
        self.end()
        self._state = _ProfileState(directory)
        self._meta = (profile, index, total, duration_seconds)
        self._started = self._last_plain = time.monotonic()
        if self.tty:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        else:
            self.message(f"batchgate: profile {index}/{total} {profile} started")

    def snapshot(self) -> Snapshot | None:
        state = self._state
        if state is None:
            return None
        state.update()
        ttfts = np.fromiter(state.ttfts, dtype=np.float64)
        profile, index, total, duration = self._meta
        return Snapshot(
            profile=profile,
            index=index,
            total=total,
            elapsed_seconds=time.monotonic() - self._started,
            duration_seconds=duration,
            done=state.done,
            errors=state.errors,
            offered_rps=state.rate(state.planned),
            achieved_rps=state.rate(state.ok_done),
            ttft_p99_seconds=float(np.quantile(ttfts, 0.99)) if len(ttfts) else None,
            kv_usage_ratio=state.kv,
            memory_bytes=state.memory,
            waiting=state.waiting,
        )

    def refresh(self) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last_plain < self.plain_every_seconds:
            return
        snap = self.snapshot()
        if snap is None:
            return
        if self._live is not None:
            self._live.update(snap.table(), refresh=True)
        else:
            self._last_plain = now
            self.message(f"batchgate: {snap.line()}")

    def end(self) -> None:
        if self._state is not None and not self.tty:
            snap = self.snapshot()
            if snap is not None:
                self.message(f"batchgate: {snap.line()} (load ended)")
        if self._live is not None:
            snap = self.snapshot()
            if snap is not None:
                self._live.update(snap.table(), refresh=True)
            self._live.stop()
            self._live = None
        self._state = None
