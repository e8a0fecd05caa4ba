"""The master (or local runner) side of a load run: every record once, then load.json.

Owns `Collector`: it writes requests.jsonl as records arrive (each id exactly once), counts them
by status, by where their chunk token counts came from, and by slot (one slot per user:
`loadgen.locust.install`), keeps the TTFTs the progress display shows, knows the run is done
when every slot's summary has arrived together with as many records as that summary states,
and writes load.json (atomically, once). It also holds why a test was refused at its start, and
why its files could not be written (a full disk: `write_error`, `write_failed`, so the runner
stops the load at once instead of sending requests whose records would be lost). It
does not receive Locust messages itself (`install` registers them), send requests, or decide
whether the run passed. Importing it imports locust (which monkey-patches the standard
library): only the load process may import it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import gevent.event
import orjson
from locust.env import Environment

from loadgen.config import RunConfig
from loadgen.load_json import build_load_json
from loadgen.records import RecordWriter
from loadgen.replay import window_line

__all__ = ["Collector"]


class Collector:
    """Master side (or local runner): writes records and, once all workers report, load.json."""

    def __init__(self, env: Environment, config: RunConfig, worker_count: int) -> None:
        self.env = env
        self.config = config
        self.spec = config.spec()
        self.worker_count = worker_count
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "requests.jsonl").unlink(missing_ok=True)
        (out / "load.json").unlink(missing_ok=True)  # a stale one would pass for this run's
        self.writer = RecordWriter(out / "requests.jsonl")
        (out / "trace.jsonl").unlink(missing_ok=True)
        if self.spec.replay is not None:
            # The window as replayed, for the gate's ideal prefix-cache hit ratio and for
            # `batchgate check` later (docs/records.md).
            lines = (orjson.dumps(window_line(r)) for r in self.spec.replay.requests)
            (out / "trace.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
        self.counts_by_status: dict[str, int] = {}
        self.chunk_tokens_sources: dict[str, int] = {}
        self.received: dict[int, int] = {}
        self.summaries: dict[int, dict[str, Any]] = {}
        self.done = gevent.event.Event()
        self.t0 = time.monotonic()
        self.wall_at_t0 = time.time()
        self.ttfts: list[float] = []
        self.load: dict[str, Any] | None = None
        self.refusal: str | None = None  # why the test was refused at its start (nothing ran)
        self.refused = gevent.event.Event()
        self.started = gevent.event.Event()  # the start time of this test is known
        self.write_error: str | None = None
        self.write_failed = gevent.event.Event()
        self.failure: str | None = None  # why a driver (this process's or a worker's) failed
        self.failed = gevent.event.Event()

    def refuse(self, message: str) -> None:
        self.refusal = message
        self.refused.set()

    def driver_failed(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self.failed.set()

    def set_start(self, start_wall: float, start_monotonic: float | None) -> None:
        self.wall_at_t0 = start_wall
        self.t0 = start_monotonic or time.monotonic() + (start_wall - time.time())
        self.started.set()

    def _cannot_write(self, exc: OSError) -> None:
        if self.write_error is None:
            where = exc.filename or self.writer.path
            self.write_error = f"cannot write {where}: {exc.strerror or exc}"
        self.write_failed.set()

    def add(self, rec: dict[str, Any]) -> None:
        try:
            written = self.writer.write(rec)
        except OSError as exc:  # the disk is full: every record from here on would be lost
            self._cannot_write(exc)
            return
        if written:
            self.counts_by_status[rec["status"]] = self.counts_by_status.get(rec["status"], 0) + 1
            self.received[rec["worker"]] = self.received.get(rec["worker"], 0) + 1
            if rec["chunk_times"]:  # a record without content has no counts to source
                source = rec["chunk_tokens_source"]
                self.chunk_tokens_sources[source] = self.chunk_tokens_sources.get(source, 0) + 1
            if rec["first_token_at"] is not None and rec["sent_at"] is not None:
                self.ttfts.append(rec["first_token_at"] - rec["sent_at"])
            if self.summaries:
                self._check_done()

    def worker_done(self, summary: dict[str, Any]) -> None:
        self.summaries[summary["worker"]] = summary
        self._check_done()

    def _check_done(self) -> None:
        complete = len(self.summaries) >= self.worker_count and all(
            self.received.get(w, 0) >= s["records"] for w, s in self.summaries.items()
        )
        if complete:
            self.done.set()

    def ended_when_done(self) -> str:
        """`ended` once every slot reported: one stopped early (ramp-down, UI stop) interrupts."""
        if any(s.get("interrupted") for s in self.summaries.values()):
            return "interrupted"
        return "completed"

    def finalize(self, ended: str, *, batch_job: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.load is not None:
            return self.load
        try:
            self.writer.close()
        except OSError as exc:
            self._cannot_write(exc)
        load = build_load_json(
            spec=self.spec,
            workers=self.worker_count,
            summaries=list(self.summaries.values()),
            counts_by_status=self.counts_by_status,
            chunk_tokens_sources=self.chunk_tokens_sources,
            t0=self.t0,
            wall_at_t0=self.wall_at_t0,
            ended_at=time.monotonic(),
            ended=ended,
            batch_job=batch_job,
            trace=self.spec.replay.summary() if self.spec.replay is not None else None,
            failure=self.failure,
        )
        path = Path(self.config.out_dir) / "load.json"
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(load, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            self._cannot_write(exc)
        self.load = load
        return load
