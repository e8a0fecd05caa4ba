"""The load process's heartbeat: `progress.json`, which says that answers are still arriving.

Owns the per-process `ReceiveMeter` (kept on the Locust environment, so each process has its
own and nothing is global), the worker side that adds its byte count to Locust's periodic
worker report, the master side that keeps each worker's last count, and the writer greenlet of
the master (or local runner) that rewrites `OUT/progress.json` atomically every half second:

    {"pid": ..., "written_at_wall": ..., "received_bytes": ..., "records": ...}

`received_bytes` is every response byte the load generator has received from the target so
far (all workers together; a worker's share is as recent as its last report, about 3 s). The
gate reads it during a run to tell a busy target from a dead one: a target whose /health is
slow while answers keep arriving is busy (docs/run.md). It does not decide anything, and a
heartbeat it cannot write (a full disk) is skipped, never fatal: the records matter more.
Importing it imports locust: only the load process may.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.httpconn import ReceiveMeter

__all__ = ["HEARTBEAT_FILE", "Heartbeat", "install_heartbeat", "receive_meter"]

HEARTBEAT_FILE = "progress.json"
_INTERVAL_SECONDS = 0.5
_REPORT_KEY = "loadgen_received_bytes"


def receive_meter(env: Environment) -> ReceiveMeter:
    """This process's meter (created on first use)."""
    meter = getattr(env, "loadgen_meter", None)
    if meter is None:
        meter = ReceiveMeter()
        env.loadgen_meter = meter  # type: ignore[attr-defined]
    return meter


def install_heartbeat(env: Environment) -> None:
    """Wire the byte counts through Locust's worker reports (worker and master sides)."""
    runner = env.runner
    meter = receive_meter(env)
    if isinstance(runner, WorkerRunner):

        def on_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            data[_REPORT_KEY] = meter.bytes_received

        env.events.report_to_master.add_listener(on_report)
    elif isinstance(runner, MasterRunner):
        by_worker: dict[str, int] = {}
        env.loadgen_worker_bytes = by_worker  # type: ignore[attr-defined]

        def on_worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            value = data.get(_REPORT_KEY)
            if isinstance(value, int):
                by_worker[client_id] = value

        env.events.worker_report.add_listener(on_worker_report)


class Heartbeat:
    """Master or local runner: rewrites OUT/progress.json until killed."""

    def __init__(self, env: Environment, out_dir: Path, records: Any) -> None:
        self.env = env
        self.path = Path(out_dir) / HEARTBEAT_FILE
        self.records = records  # callable: records received so far
        self._warned = False

    def received_bytes(self) -> int:
        total = receive_meter(self.env).bytes_received
        return total + sum(getattr(self.env, "loadgen_worker_bytes", {}).values())

    def beat(self) -> None:
        body = {
            "pid": os.getpid(),
            "written_at_wall": round(time.time(), 3),
            "received_bytes": self.received_bytes(),
            "records": int(self.records()),
        }
        tmp = self.path.with_name(f"{HEARTBEAT_FILE}.tmp")
        try:
            tmp.write_text(json.dumps(body) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not self._warned:  # once: a full disk would otherwise repeat it twice a second
                self._warned = True
                with contextlib.suppress(OSError):  # stderr may be on the same full disk
                    print(f"loadgen: heartbeat {self.path} not written: {exc}", file=sys.stderr)

    def loop(self) -> None:
        while True:
            self.beat()
            gevent.sleep(_INTERVAL_SECONDS)
