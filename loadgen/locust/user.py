"""The Locust user that drives a worker's share of the open-loop schedule.

Owns `DriverUser` (one per worker process: it runs a `LoadSession` on that worker's share of the
schedule, starting at the time the master chose, on the master's clock when both share a host)
and the Locust request events each record fires (TTFT and E2E as request types, named
`endpoint:stage`, response_length = tokens). Records go to the master through a `MessageSink`
(worker) or straight into the `Collector` (local runner). It does not plan or send requests
itself (`loadgen.session`), write files, or wire listeners (`loadgen.locust.install`).
Importing it imports locust: only the load process may import it.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust import User, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from loadgen.locust.collector import Collector
from loadgen.locust.options import config_from_options
from loadgen.locust.sink import MessageSink
from loadgen.records import RequestRecord
from loadgen.session import LoadSession

__all__ = ["DriverUser"]

_SAME_HOST_CLOCK_SECONDS = 0.05  # wall/monotonic conversion error is microseconds on one host


def _fire(env: Environment, rec: RequestRecord) -> None:
    name = f"{rec.endpoint}:{rec.stage}"
    exc = None if rec.status == "ok" else Exception(f"{rec.status}: {rec.error}")
    if rec.first_token_at is not None and rec.sent_at is not None:
        env.events.request.fire(
            request_type="TTFT",
            name=name,
            response_time=(rec.first_token_at - rec.sent_at) * 1000,
            response_length=rec.chunk_tokens[0] if rec.chunk_tokens else 0,
            exception=None,
            context={"priority": rec.priority, "length_class": rec.length_class},
        )
    if rec.sent_at is not None and rec.done_at is not None:
        env.events.request.fire(
            request_type="E2E",
            name=name,
            response_time=(rec.done_at - rec.sent_at) * 1000,
            response_length=rec.output_tokens or 0,
            exception=exc,
            context={"priority": rec.priority, "length_class": rec.length_class},
        )


class DriverUser(User):
    """Runs this worker's whole share of the schedule; one per worker process."""

    # Locust must not pace this user: the session schedules its own requests.
    wait_time = staticmethod(lambda: 0)  # type: ignore[assignment]

    @task
    def drive(self) -> None:
        env = self.environment
        runner = env.runner
        config = config_from_options(env)
        opts = env.parsed_options
        count = int(getattr(opts, "loadgen_worker_count", 0) or 1)
        start_wall = float(getattr(opts, "loadgen_start_wall", 0.0) or time.time())
        t0 = time.monotonic() + (start_wall - time.time())
        # Same host as the master (one CLOCK_MONOTONIC): use its t0 exactly. Another host: keep
        # the local clock for timing and shift the records onto the master's clock.
        master_t0 = float(getattr(opts, "loadgen_start_monotonic", 0.0) or t0)
        shift = master_t0 - t0
        if abs(shift) < _SAME_HOST_CLOCK_SECONDS:
            t0, shift = master_t0, 0.0
        if isinstance(runner, WorkerRunner):
            index = runner.worker_index
            sink: Any = MessageSink(runner, clock_shift_seconds=shift)
            flusher = gevent.spawn(sink.flusher)
        else:
            index = 0
            collector: Collector = env.loadgen_collector  # type: ignore[attr-defined]
            sink = lambda rec: collector.add(rec.to_dict())  # noqa: E731
            flusher = None

        def record(rec: RequestRecord) -> None:
            sink(rec)
            _fire(env, rec)

        session = LoadSession(
            config=config, spec=config.spec(), worker_index=index, worker_count=count, sink=record
        )
        summary = session.run(t0)
        if flusher is not None:
            flusher.kill()
            sink.flush()
            summary["records"] = sink.sent
            runner.send_message("loadgen_done", summary)
        else:
            summary["records"] = collector.received.get(0, 0)
            collector.worker_done(summary)
        raise StopUser()
