"""Locust integration: the driver user, record transport to the master, and `load.json` output.

Owns `DriverUser` (one per worker process: it runs a `LoadSession` on that worker's share of the
schedule), Locust request events (TTFT and E2E as request types, response_length = tokens),
custom messages carrying records from workers to the master (batched; the master writes each id
exactly once and waits for every worker's summary, which states how many records it sent), and
`Collector`, which writes requests.jsonl as records arrive and load.json at the end.
Importing this module imports locust (which monkey-patches the standard library): only the load
process may import it. It does not parse the loadgen command line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import gevent
import gevent.event
from locust import User, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from loadgen.config import RunConfig
from loadgen.load_json import build_load_json
from loadgen.records import RecordWriter, RequestRecord
from loadgen.session import LoadSession

__all__ = ["Collector", "DriverUser", "add_arguments", "install"]

_BATCH_RECORDS = 200
_BATCH_SECONDS = 0.2
_START_MARGIN_SECONDS = 0.1
_MASTER_MARGIN_SECONDS = 0.5  # the spawn message must reach every worker
_SAME_HOST_CLOCK_SECONDS = 0.05  # wall/monotonic conversion error is microseconds on one host
_PLAN_SECONDS = 1e-4  # generous time to plan one request on a busy machine


def add_arguments(parser: Any) -> None:
    """Locust custom arguments (forwarded by Locust from master to workers)."""
    group = parser  # Locust's own add_argument (groups lack include_in_web_ui)
    group.add_argument(
        "--loadgen-config",
        default="",
        help="full run config JSON (set by the loadgen CLI; overrides the options below)",
        include_in_web_ui=False,
    )
    group.add_argument(
        "--loadgen-profile",
        default="steady",
        env_var="LOADGEN_PROFILE",
        help="profile name: steady, ramp, night_trickle, burst, mixed_lengths, priority_mix",
    )
    group.add_argument(
        "--loadgen-scale", default="smoke", env_var="LOADGEN_SCALE", help="smoke | quick | full"
    )
    group.add_argument(
        "--loadgen-overrides-json",
        default="{}",
        env_var="LOADGEN_OVERRIDES_JSON",
        help="profile parameter overrides as a JSON object",
    )
    group.add_argument(
        "--loadgen-out",
        default="runs/locust",
        env_var="LOADGEN_OUT",
        help="output directory (requests.jsonl, load.json)",
    )
    group.add_argument(
        "--loadgen-model",
        default="",
        env_var="LOADGEN_MODEL",
        help="model name sent in requests (default: first of /v1/models)",
    )
    group.add_argument(
        "--loadgen-api-key",
        default="",
        env_var="LOADGEN_API_KEY",
        include_in_web_ui=False,
        help="API key (Bearer)",
    )
    group.add_argument(
        "--loadgen-worker-count",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )
    group.add_argument(
        "--loadgen-start-monotonic",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )
    group.add_argument(
        "--loadgen-start-wall",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )


def config_from_options(env: Environment) -> RunConfig:
    opts = env.parsed_options
    if opts is not None and getattr(opts, "loadgen_config", ""):
        return RunConfig.from_json(opts.loadgen_config)
    host = env.host or (getattr(opts, "host", None) if opts else None)
    if not host:
        raise ValueError("set the target with --host URL")
    model = getattr(opts, "loadgen_model", "") or _first_model(host)
    return RunConfig(
        target_url=host,
        model=model,
        out_dir=getattr(opts, "loadgen_out", "runs/locust"),
        profile=getattr(opts, "loadgen_profile", "steady"),
        scale=getattr(opts, "loadgen_scale", "smoke"),
        overrides=json.loads(getattr(opts, "loadgen_overrides_json", "{}") or "{}"),
        api_key=getattr(opts, "loadgen_api_key", "") or None,
    )


def _first_model(url: str) -> str:
    from loadgen.probe import probe_target

    return probe_target(url, api_key=None, timeout_seconds=5.0) or "default"


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
        self.counts_by_status: dict[str, int] = {}
        self.received: dict[int, int] = {}
        self.summaries: dict[int, dict[str, Any]] = {}
        self.done = gevent.event.Event()
        self.t0 = time.monotonic()
        self.wall_at_t0 = time.time()
        self.ttfts: list[float] = []
        self.load: dict[str, Any] | None = None

    def set_start(self, start_wall: float, start_monotonic: float | None) -> None:
        self.wall_at_t0 = start_wall
        self.t0 = start_monotonic or time.monotonic() + (start_wall - time.time())

    def add(self, rec: dict[str, Any]) -> None:
        if self.writer.write(rec):
            self.counts_by_status[rec["status"]] = self.counts_by_status.get(rec["status"], 0) + 1
            self.received[rec["worker"]] = self.received.get(rec["worker"], 0) + 1
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

    def finalize(self, ended: str) -> dict[str, Any]:
        if self.load is not None:
            return self.load
        self.writer.close()
        load = build_load_json(
            spec=self.spec,
            workers=self.worker_count,
            summaries=list(self.summaries.values()),
            counts_by_status=self.counts_by_status,
            t0=self.t0,
            wall_at_t0=self.wall_at_t0,
            ended_at=time.monotonic(),
            ended=ended,
        )
        path = Path(self.config.out_dir) / "load.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(load, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        self.load = load
        return load


class _MessageSink:
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
            sink: Any = _MessageSink(runner, clock_shift_seconds=shift)
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


def build_parsed_options(config: RunConfig) -> argparse.Namespace:
    """Locust's default options plus ours, for a programmatic master or local runner."""
    from locust.argument_parser import default_args_dict

    opts = argparse.Namespace(**default_args_dict())
    opts.headless = True
    opts.host = config.target_url
    opts.loadgen_config = config.to_json()
    opts.loadgen_worker_count = config.workers
    opts.loadgen_start_wall = 0.0
    opts.loadgen_start_monotonic = 0.0
    return opts
