"""The Locust user that drives one slot of the open-loop schedule.

Owns `DriverUser` (one per slot: it takes its slot of the split made at test start, runs a
`LoadSession` on that slot's share of the schedule, starting at the time the master chose, on
the master's clock when both share a host; a user the split has no slot for sends nothing) and
the Locust request events each record fires (TTFT and E2E as request types, named
`endpoint:stage`, response_length = tokens). Records go to the master through a `MessageSink`
(worker) or straight into the `Collector` (local runner). It does not plan or send requests
itself (`loadgen.session`), split the schedule (`loadgen.locust.install`), write files, or wire
listeners (`loadgen.locust.install`). Importing it imports locust: only the load process may.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust import User, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from loadgen.locust.collector import Collector
from loadgen.locust.heartbeat import receive_meter
from loadgen.locust.install import SplitError, take_slot
from loadgen.locust.options import config_from_options
from loadgen.locust.sink import MessageSink
from loadgen.records import RequestRecord
from loadgen.session import LoadSession

__all__ = ["DriverUser"]

logger = logging.getLogger(__name__)

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
    """Runs one slot's whole share of the schedule, once; one user per slot."""

    loadgen_driver = True  # what `install.split_at_start` counts as a schedule user
    # Locust must not pace this user: the session schedules its own requests.
    wait_time = staticmethod(lambda: 0)  # type: ignore[assignment]
    _drove = False

    @task
    def drive(self) -> None:
        if self._drove:  # the task ended with an error: never send the share a second time
            raise StopUser()
        self._drove = True
        env = self.environment
        runner = env.runner
        try:
            slot, slots = take_slot(env)
        except SplitError as exc:
            logger.error("loadgen: this user sends nothing: %s", exc)
            if int(getattr(env.parsed_options, "loadgen_users_per_worker", 0) or 0) > 0:
                env.process_exit_code = 2  # more users than the split: not the run asked for
            raise StopUser() from None
        config = config_from_options(env)
        opts = env.parsed_options
        start_wall = float(getattr(opts, "loadgen_start_wall", 0.0) or time.time())
        t0 = time.monotonic() + (start_wall - time.time())
        # Same host as the master (one CLOCK_MONOTONIC): use its t0 exactly. Another host: keep
        # the local clock for timing and shift the records onto the master's clock.
        master_t0 = float(getattr(opts, "loadgen_start_monotonic", 0.0) or t0)
        shift = master_t0 - t0
        if abs(shift) < _SAME_HOST_CLOCK_SECONDS:
            t0, shift = master_t0, 0.0
        if isinstance(runner, WorkerRunner):
            sink: Any = MessageSink(runner, clock_shift_seconds=shift)
            flusher = gevent.spawn(sink.flusher)
        else:
            collector: Collector = env.loadgen_collector  # type: ignore[attr-defined]
            sink = lambda rec: collector.add(rec.to_dict())  # noqa: E731
            flusher = None

        def record(rec: RequestRecord) -> None:
            sink(rec)
            _fire(env, rec)

        # The slot is the session's "worker": record ids `<slot>-<n>`, `worker` = slot.
        session = LoadSession(
            config=config, spec=config.spec(), worker_index=slot, worker_count=slots, sink=record
        )
        # Every byte its connections receive counts in this process's heartbeat (the gate's
        # sign that a target with a slow /health is still answering).
        session.client.pool.meter = receive_meter(env)
        try:
            summary = session.run(t0)
        except Exception as exc:
            # A bug in the driver: the run ends now and says why (the traceback goes to the
            # log), instead of waiting out its time limit for a summary that never comes.
            logger.exception("loadgen: the load driver failed")
            reason = f"the load driver failed: {type(exc).__name__}: {exc}"
            if flusher is not None:
                flusher.kill()
                sink.flush()  # the records it made before failing are kept
                runner.send_message("loadgen_failed", {"worker": slot, "reason": reason})
            else:
                collector.driver_failed(reason)
            raise StopUser() from None
        if flusher is not None:
            flusher.kill()
            sink.flush()
            summary["records"] = sink.sent
            runner.send_message("loadgen_done", summary)
        else:
            summary["records"] = collector.received.get(slot, 0)
            collector.worker_done(summary)
        raise StopUser()
