"""Wiring loadgen into a Locust environment: the start time, record messages, and load.json.

Owns `install`: on a master or local runner it creates the `Collector`, chooses the common start
time at test start (leaving workers time to plan every request) and hands it, with the run
config, to the workers through the parsed options sent with the spawn message; on a master it
registers the `loadgen_records` / `loadgen_done` messages. Standalone (plain `locust` command)
it also writes load.json once every worker has reported, or on quit, and quits a headless run.
It does nothing on a worker. It does not parse options (`loadgen.locust.options`) or run
requests (`loadgen.locust.user`). Importing it imports locust: only the load process may.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.config import RunConfig
from loadgen.locust.collector import Collector
from loadgen.locust.options import config_from_options

__all__ = ["install"]

_START_MARGIN_SECONDS = 0.1
_MASTER_MARGIN_SECONDS = 0.5  # the spawn message must reach every worker
_PLAN_SECONDS = 1e-4  # generous time to plan one request on a busy machine


def install(
    env: Environment, config: RunConfig | None = None, *, standalone: bool = True
) -> Collector | None:
    """Wire loadgen into `env` (after its runner exists); returns the master/local collector.

    `standalone` (plain `locust` command): load.json is written when all workers have reported,
    or on quit, and a headless run quits once the schedule is done. The loadgen CLI passes False
    and drives those steps itself.
    """
    runner = env.runner
    if isinstance(runner, WorkerRunner) or runner is None:
        return None
    config = config or config_from_options(env)
    expected = config.workers if isinstance(runner, MasterRunner) else 1
    collector = Collector(env, config, expected)
    env.loadgen_collector = collector  # type: ignore[attr-defined]

    def on_test_start(**_: Any) -> None:
        opts = env.parsed_options
        # Workers plan every request before the start time; leave them time to do so.
        margin = _START_MARGIN_SECONDS + collector.spec.schedule.expected_count * _PLAN_SECONDS
        if isinstance(runner, MasterRunner):
            collector.worker_count = max(runner.worker_count, 1)
            margin += _MASTER_MARGIN_SECONDS
        start_wall = time.time() + margin
        if opts is not None:
            opts.loadgen_worker_count = collector.worker_count
            opts.loadgen_start_wall = start_wall
            opts.loadgen_start_monotonic = time.monotonic() + (start_wall - time.time())
            opts.loadgen_config = config.to_json()
        collector.set_start(start_wall, getattr(opts, "loadgen_start_monotonic", None))

    def on_done_watch() -> None:
        collector.done.wait()
        collector.finalize("completed")
        if getattr(env.parsed_options, "headless", False):
            runner.quit()

    def on_quitting(**_: Any) -> None:
        collector.finalize("completed" if collector.done.is_set() else "interrupted")

    env.events.test_start.add_listener(on_test_start)
    if isinstance(runner, MasterRunner):
        runner.register_message(
            "loadgen_records", lambda msg, **_: [collector.add(r) for r in msg.data]
        )
        runner.register_message("loadgen_done", lambda msg, **_: collector.worker_done(msg.data))
    if standalone:
        gevent.spawn(on_done_watch)
        env.events.quitting.add_listener(on_quitting)
    return collector
