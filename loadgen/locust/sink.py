"""The worker side of record transport: batches of records to the master as Locust messages.

Owns `MessageSink`: it turns each finished `RequestRecord` into its dict, shifts a remote
worker's record times onto the master's monotonic clock, and sends `loadgen_records` custom
messages in batches (by size, or on a timer by its flusher greenlet), counting what it sent so
the worker's summary can state it. It does not send the summary (`loadgen_done`, the driver user
does), receive anything, or write files. Importing it imports locust: only the load process may
import it.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust.runners import WorkerRunner

from loadgen.records import RequestRecord

__all__ = ["MessageSink"]

_BATCH_RECORDS = 200
_BATCH_SECONDS = 0.2


class MessageSink:
    """Worker side: batches records to the master as custom messages."""

    def __init__(self, runner: WorkerRunner, *, clock_shift_seconds: float) -> None:
        self.runner = runner
        self.shift = clock_shift_seconds
        self.batch: list[dict[str, Any]] = []
        self.sent = 0
        self.last_flush = time.monotonic()

    def __call__(self, rec: RequestRecord) -> None:
        obj = rec.to_dict()
        if self.shift:  # a remote worker: move its clock onto the master's monotonic clock
            for key in ("planned_at", "sent_at", "first_token_at", "done_at"):
                if obj[key] is not None:
                    obj[key] += self.shift
            obj["chunk_times"] = [round(t + self.shift, 6) for t in obj["chunk_times"]]
        self.batch.append(obj)
        if len(self.batch) >= _BATCH_RECORDS or time.monotonic() - self.last_flush > _BATCH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            batch, self.batch = self.batch, []
            self.runner.send_message("loadgen_records", batch)
            self.sent += len(batch)
        self.last_flush = time.monotonic()

    def flusher(self) -> None:
        while True:
            gevent.sleep(_BATCH_SECONDS)
            self.flush()
