"""Wiring loadgen into a Locust environment: the split, the start time, records, and load.json.

Owns `install`: on a master or local runner it creates the `Collector` and, at test start, splits
the schedule over the users Locust is about to spawn and chooses the common start time (leaving
Locust time to spawn every user and each user time to plan every request); it hands both, with
the run config, to the workers through the parsed options sent with the spawn message. On a
master it registers the `loadgen_records` / `loadgen_done` messages. Standalone (plain `locust`
command) it also writes load.json once every slot has reported, or on quit, quits a headless
run (once Locust's stats and CSV count every sent request), and quits a refused headless run
with exit code 2 (stops a refused web UI test). On a
worker it only resets the order its users take slots in at each test start.

Owns the split too (`split_at_start`, `take_slot`): one slot per `DriverUser`, users per worker x
workers slots in all, workers ranked by their Locust worker index. A user takes slot
rank x users per worker + the order its worker's users started in, and sends arrivals slot,
slot + slots, ... (`loadgen.plan.build_plan`), so every planned request is sent exactly once
whatever `-u` is. What cannot be split exactly is refused (no user, users not a multiple of the
workers, a load shape or other user classes that change the count), and so is a user beyond the
split (added during the run, or on a worker that joined late): it sends nothing.

It does not parse options (`loadgen.locust.options`) or run requests (`loadgen.locust.user`).
Importing it imports locust: only the load process may.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import gevent
import locust.runners
import locust.stats
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.config import RunConfig
from loadgen.errors import LoadgenError
from loadgen.locust.collector import Collector
from loadgen.locust.heartbeat import install_heartbeat
from loadgen.locust.options import config_from_options

__all__ = ["Split", "SplitError", "install", "split_at_start", "take_slot"]

logger = logging.getLogger(__name__)

_START_MARGIN_SECONDS = 0.1
_MASTER_MARGIN_SECONDS = 0.5  # the spawn message must reach every worker
_PLAN_SECONDS = 1e-4  # generous time to plan one request on a busy machine
_STATS_WAIT_SLACK_SECONDS = 5.0  # beyond one worker stats report, for a busy machine


def install(
    env: Environment, config: RunConfig | None = None, *, standalone: bool = True
) -> Collector | None:
    """Wire loadgen into `env` (after its runner exists); returns the master/local collector.

    `standalone` (plain `locust` command): load.json is written when all workers have reported,
    or on quit, and a headless run quits once the schedule is done. The loadgen CLI passes False
    and drives those steps itself.
    """
    runner = env.runner
    if isinstance(runner, WorkerRunner):
        env.events.test_start.add_listener(lambda **_: reset_users(env))
        install_heartbeat(env)
        return None
    if runner is None:
        return None
    install_heartbeat(env)
    config = config or config_from_options(env)
    expected = config.workers if isinstance(runner, MasterRunner) else 1
    collector = Collector(env, config, expected)
    env.loadgen_collector = collector  # type: ignore[attr-defined]

    def refuse(message: str) -> None:
        collector.refuse(message)
        if not standalone:  # the loadgen CLI reports it and quits
            return
        logger.error("loadgen: refused: %s", message)
        if getattr(env.parsed_options, "headless", False):
            env.process_exit_code = 2
            gevent.spawn(runner.quit)
        else:
            gevent.spawn(runner.stop)  # the web UI stays up for a test that can be split

    def on_test_start(**_: Any) -> None:
        reset_users(env)
        collector.refusal = None
        collector.refused.clear()
        opts = env.parsed_options
        try:
            split = split_at_start(env)
        except SplitError as exc:
            if opts is not None:
                put_in_options(opts, None)  # users spawned anyway send nothing
            refuse(str(exc))
            return
        collector.worker_count = split.slots
        # Every user plans every request (its worker's users one after another) before the
        # start time, and the last user starts only once Locust has spawned it.
        planning = split.users_per_worker * collector.spec.schedule.expected_count * _PLAN_SECONDS
        margin = _START_MARGIN_SECONDS + split.ramp_seconds + planning
        if isinstance(runner, MasterRunner):
            margin += _MASTER_MARGIN_SECONDS
        start_wall = time.time() + margin
        if opts is not None:
            put_in_options(opts, split)
            opts.loadgen_start_wall = start_wall
            opts.loadgen_start_monotonic = time.monotonic() + (start_wall - time.time())
            opts.loadgen_config = config.to_json()
        collector.set_start(start_wall, getattr(opts, "loadgen_start_monotonic", None))

    def on_done_watch() -> None:
        collector.done.wait()
        collector.finalize(collector.ended_when_done())
        if getattr(env.parsed_options, "headless", False):
            _let_locust_stats_catch_up(env, collector)
            runner.quit()

    def on_quitting(**_: Any) -> None:
        if collector.refusal is not None and not collector.summaries:
            return  # nothing ran: no load.json rather than one that looks like a run
        collector.finalize(
            collector.ended_when_done() if collector.done.is_set() else "interrupted"
        )

    env.events.test_start.add_listener(on_test_start)
    if isinstance(runner, MasterRunner):
        runner.register_message(
            "loadgen_records", lambda msg, **_: [collector.add(r) for r in msg.data]
        )
        runner.register_message("loadgen_done", lambda msg, **_: collector.worker_done(msg.data))
        runner.register_message(
            "loadgen_failed", lambda msg, **_: collector.driver_failed(msg.data["reason"])
        )
    if standalone:
        gevent.spawn(on_done_watch)
        env.events.quitting.add_listener(on_quitting)
    return collector


def _e2e_requests(runner: Any) -> int:
    return sum(e.num_requests for (_, kind), e in runner.stats.entries.items() if kind == "E2E")


def _let_locust_stats_catch_up(env: Environment, collector: Collector) -> None:
    """Before a headless run quits: Locust's stats and its CSV file count every sent request.

    Each sent request fired one `E2E` event. A master has those counts only once every worker's
    periodic stats report arrived, and Locust's CSV writer rewrites the stats file once a
    second but not on quit, so quitting at once would leave the last requests out of both.
    """
    sent = sum(int(s["sent"]) for s in collector.summaries.values())
    deadline = time.monotonic() + locust.runners.WORKER_REPORT_INTERVAL + _STATS_WAIT_SLACK_SECONDS
    while _e2e_requests(env.runner) < sent and time.monotonic() < deadline:
        gevent.sleep(0.05)
    if getattr(env.parsed_options, "csv_prefix", None):
        gevent.sleep(locust.stats.CSV_STATS_INTERVAL_SEC + 0.2)  # one more rewrite of the CSV


# -- the split of the schedule over the users ---------------------------------------------


class SplitError(LoadgenError):
    """The schedule cannot be split exactly over these users: refuse rather than send it twice."""


@dataclass(frozen=True, kw_only=True)
class Split:
    workers: int
    users_per_worker: int
    ranks: dict[str, int]  # a worker's Locust client id -> its rank; empty on a local runner
    ramp_seconds: float  # until Locust has spawned the last user

    @property
    def slots(self) -> int:
        return self.workers * self.users_per_worker


def split_at_start(env: Environment) -> Split:
    """The split of the test now starting (master or local runner); `SplitError` if none."""
    runner = env.runner
    users = int(getattr(runner, "target_user_count", 0) or 0)
    if env.shape_class is not None:
        raise SplitError(
            f"a load shape ({type(env.shape_class).__name__}) changes the user count during the "
            "run, which would re-split the schedule; the profile sets the rate: use -u instead"
        )
    others = sorted(c.__name__ for c in env.user_classes if not getattr(c, "loadgen_driver", False))
    if others:
        raise SplitError(
            f"user classes other than DriverUser ({', '.join(others)}) would take part of -u; "
            "run loadgen's locustfile on its own"
        )
    if isinstance(runner, MasterRunner):
        master = runner
        active = master.clients.ready + master.clients.running + master.clients.spawning
        ordered = sorted(active, key=lambda node: master.get_worker_index(node.id))
        ranks = {node.id: rank for rank, node in enumerate(ordered)}
        workers, rate = len(ordered), float(master.spawn_rate or 0.0)
    else:
        ranks, workers = {}, 1
        rate = float(getattr(env.parsed_options, "spawn_rate", 0.0) or 0.0)
    if users < 1:
        raise SplitError("no user to send the schedule: use -u 1 or more")
    if workers < 1:
        raise SplitError("no worker is connected")
    if users % workers:
        raise SplitError(
            f"-u {users} cannot be split evenly over {workers} workers (Locust would give some "
            f"workers more users than others): use a multiple of {workers}, e.g. -u {workers}"
        )
    return Split(
        workers=workers,
        users_per_worker=users // workers,
        ranks=ranks,
        ramp_seconds=_ramp_seconds(users, rate),
    )


def _ramp_seconds(users: int, rate: float) -> float:
    """When Locust's dispatcher spawns the last of `users` at `rate` users/s (0: all at once)."""
    if rate <= 0 or not math.isfinite(rate):
        return 0.0
    batch = max(1, math.floor(rate))  # users per dispatch wave, as locust.dispatch does
    return (math.ceil(users / batch) - 1) * batch / rate


def put_in_options(opts: Any, split: Split | None) -> None:
    """Write the split (None: refused) into the parsed options the spawn message carries."""
    opts.loadgen_worker_count = split.workers if split else 0
    opts.loadgen_users_per_worker = split.users_per_worker if split else 0
    opts.loadgen_worker_ranks = json.dumps(split.ranks if split else {}, sort_keys=True)


def reset_users(env: Environment) -> None:
    """A new test starts in this process: its users take local indexes from 0 again."""
    env.loadgen_next_user = itertools.count()  # type: ignore[attr-defined]


def take_slot(env: Environment) -> tuple[int, int]:
    """This user's slot and the number of slots; `SplitError` if it must send nothing."""
    counter = getattr(env, "loadgen_next_user", None)
    if counter is None:
        reset_users(env)
        counter = env.loadgen_next_user  # type: ignore[attr-defined]
    local = next(counter)
    opts = env.parsed_options
    per = int(getattr(opts, "loadgen_users_per_worker", 0) or 0)
    workers = int(getattr(opts, "loadgen_worker_count", 0) or 0)
    if per < 1 or workers < 1:
        raise SplitError(
            "this test was refused at its start (see the log): this user sends nothing"
        )
    runner = env.runner
    if isinstance(runner, WorkerRunner):
        ranks = json.loads(getattr(opts, "loadgen_worker_ranks", "") or "{}")
        rank = ranks.get(runner.client_id)
        if rank is None:
            raise SplitError(
                "this worker joined after the test started and the schedule is already split "
                "over the other workers: its users send nothing"
            )
    else:
        rank = 0
    if local >= per:
        raise SplitError(
            f"the schedule was split over {per * workers} users at test start; a user added "
            "during the run sends nothing (stop the test and start it again to change -u)"
        )
    return rank * per + local, per * workers
