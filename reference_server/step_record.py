"""Step telemetry: one StepRecord per engine step, kept in a bounded ring buffer (StepLog) and
optionally appended to a JSONL file.

It stores and serves records; it does not compute them (the engine does) and knows nothing of HTTP.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, fields
from typing import IO, Any

__all__ = ["StepLog", "StepRecord"]


@dataclass(slots=True, kw_only=True)
class StepRecord:
    seq: int  # +1 per step; a gap seen by a poller means records were dropped
    start_time: float  # time.monotonic() at step start
    wall_time: float  # time.time() at step start
    duration_seconds: float
    forward_seconds: float
    policy: str
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_kv_blocks_used: int
    num_kv_blocks_total: int
    num_preemptions: int
    num_recomputed_tokens: int
    num_waiting: dict[str, int]
    num_running: dict[str, int]
    # The slo policy's plan for this step: its token budget and the cost model's predicted
    # duration (None under the other policies, and while the model is still learning).
    token_budget: int | None = None
    predicted_seconds: float | None = None
    # Tokens the sequences admitted in this step found in the prefix cache: their prefill was
    # skipped (not in num_prefill_tokens). Re-admissions after preemption included.
    num_cached_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        # Built by hand: dataclasses.asdict deep-copies recursively and costs ~10x more per step.
        row = {name: getattr(self, name) for name in _FIELD_NAMES}
        row["num_waiting"] = dict(self.num_waiting)
        row["num_running"] = dict(self.num_running)
        return row


_FIELD_NAMES = tuple(f.name for f in fields(StepRecord))


class StepLog:
    """The most recent `max_records` step records, readable from any thread."""

    def __init__(self, *, max_records: int, path: str | None = None) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        self._records: deque[dict[str, Any]] = deque(maxlen=max_records)
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115
        self._latest_seq = 0

    def append(self, record: StepRecord) -> None:
        row = record.to_dict()
        with self._lock:
            self._records.append(row)
            self._latest_seq = record.seq
        if self._file is not None:
            # One line per step, flushed so a crash loses at most the line being written.
            self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
            self._file.flush()

    def after(self, seq: int, limit: int = 1000) -> tuple[list[dict[str, Any]], int, int]:
        """(records with seq > `seq`, oldest first, at most `limit`; oldest seq still held;
        latest seq). The oldest/latest are 0 while the log is empty."""
        with self._lock:
            if not self._records:
                return [], 0, self._latest_seq
            oldest = self._records[0]["seq"]
            start = max(0, seq + 1 - oldest)
            rows = [self._records[i] for i in range(start, min(len(self._records), start + limit))]
            return rows, oldest, self._latest_seq

    @property
    def latest_seq(self) -> int:
        return self._latest_seq

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
