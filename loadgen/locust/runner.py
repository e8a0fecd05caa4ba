"""Runs a load profile under Locust from the loadgen CLI: local, or master with workers.

Owns building the Locust environment programmatically, starting local worker processes
(`python -m loadgen.worker`) or waiting for remote ones, the progress display loop and the
heartbeat (`progress.json`, `loadgen.locust.heartbeat`), Ctrl-C handling (cancel in-flight
requests, write load.json with `ended: interrupted`), a worker lost mid-run (its process exited
or Locust marked it missing: the others are stopped, their records kept, load.json says
`ended: crashed`), the greenlet of the `offline_job` profile's Batch API job
(`loadgen.batch_job`), and shutdown.
Importing it imports locust (gevent monkey-patching): only `loadgen.cli` imports it, lazily, in
the load process. It does not parse arguments, collect records (`loadgen.locust.collector`) or
drive requests (`loadgen.locust.user`).
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import contextlib  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.runners import MasterRunner  # noqa: E402

from loadgen.batch_job import BatchJob, job_enabled  # noqa: E402
from loadgen.config import RunConfig  # noqa: E402
from loadgen.locust.heartbeat import Heartbeat  # noqa: E402
from loadgen.locust.install import install  # noqa: E402
from loadgen.locust.options import build_parsed_options  # noqa: E402
from loadgen.locust.user import DriverUser  # noqa: E402
from loadgen.progress import Progress  # noqa: E402

__all__ = ["run_load"]

_WORKER_WAIT_SECONDS = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_load(
    config: RunConfig,
    *,
    master_bind_host: str = "127.0.0.1",
    master_port: int = 0,
    remote_workers: bool = False,
) -> dict[str, Any]:
    """Run the profile to completion (or Ctrl-C); returns the load.json object."""
    env = Environment(
        user_classes=[DriverUser],
        host=config.target_url,
        parsed_options=build_parsed_options(config),
    )
    procs: list[subprocess.Popen[bytes]] = []
    if config.workers == 1 and not remote_workers:
        runner = env.create_local_runner()
    else:
        port = master_port or _free_port()
        runner = env.create_master_runner(master_bind_host=master_bind_host, master_bind_port=port)
        if not remote_workers:
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "loadgen.worker",
                        "--master-host",
                        "127.0.0.1",
                        "--master-port",
                        str(port),
                        "--parent-pid",
                        str(os.getpid()),
                    ],
                    # own session: a terminal Ctrl-C reaches the master only, which then stops
                    # the workers in order so their last records still arrive
                    start_new_session=True,
                )
                for _ in range(config.workers)
            ]
        else:
            print(
                f"loadgen: master waiting for {config.workers} workers on "
                f"{master_bind_host}:{port}",
                file=sys.stderr,
                flush=True,
            )
    collector = install(env, config, standalone=False)
    assert collector is not None  # a local or master runner always has one
    progress = Progress(collector)
    stop_requested = gevent.event.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(signum, stop_requested.set)
    ended = "completed"
    if config.workers > 1 or remote_workers:
        try:
            _wait_for_workers(runner, config.workers, procs, stop_requested)
        except RuntimeError:
            runner.quit()
            _reap(procs, timeout_seconds=0.0)
            raise
    # Everything imported and built so far (locust, gevent, the plan) goes to the permanent
    # generation: a full collection mid-run then scans only what the load allocates, instead
    # of pausing the client while a response waits unread (a pause would be timed as TTFT).
    gc.collect()
    gc.freeze()
    runner.start(config.workers, spawn_rate=config.workers)  # sets the start time (test_start)
    progress_greenlet = gevent.spawn(progress.loop)
    heartbeat = Heartbeat(env, Path(config.out_dir), lambda: collector.writer.count)
    heartbeat_greenlet = gevent.spawn(heartbeat.loop)
    lost = gevent.event.AsyncResult()  # set to why, when a worker is lost mid-run
    watching = isinstance(runner, MasterRunner)
    watch_greenlet = gevent.spawn(_watch_workers, runner, procs, lost) if watching else None
    spec = collector.spec
    job: BatchJob | None = None
    job_greenlet: gevent.Greenlet | None = None
    if job_enabled(spec) and collector.refusal is None:
        # Beside the users, in this process: the job is one stream of requests, not a share
        # of the schedule, so it is sent once whatever the number of workers.
        job = BatchJob(
            spec=spec,
            target_url=config.target_url,
            model=config.model,
            api_key=config.api_key,
            out_dir=Path(config.out_dir),
        )
        job_greenlet = gevent.spawn(_run_job, job, collector)
    limit = spec.schedule.duration_seconds + float(spec.params["request_timeout_seconds"]) + 30.0
    gevent.wait(
        [
            collector.done,
            stop_requested,
            collector.refused,
            lost,
            collector.write_failed,
            collector.failed,
        ],
        timeout=limit,
        count=1,
    )
    if watch_greenlet is not None:
        watch_greenlet.kill()
    if collector.refusal is not None:  # e.g. more remote workers than --workers connected
        if job_greenlet is not None:
            job_greenlet.kill(block=True, timeout=10)  # nothing ran: no job either
        progress_greenlet.kill()
        heartbeat_greenlet.kill()
        runner.quit()
        _reap(procs, timeout_seconds=10.0)
        raise RuntimeError(f"the run was refused: {collector.refusal}")
    if collector.failed.is_set() and not collector.done.is_set():
        # A driver raised (a bug): the others stop, their records kept; the run crashed.
        ended = "crashed"
        _say(f"loadgen: error: {collector.failure}; stopping the load")
        if isinstance(runner, MasterRunner):
            runner.stop()
            deadline = time.monotonic() + 10.0
            while len(collector.summaries) < collector.worker_count - 1 and (
                time.monotonic() < deadline
            ):
                gevent.sleep(0.1)
        else:
            for greenlet in list(runner.user_greenlets):
                greenlet.kill(block=True, timeout=10)
    elif lost.ready() and not collector.done.is_set():
        # Never a "completed" run with a share of the schedule missing: the surviving
        # workers stop (their in-flight requests cancelled, their records kept) and the run
        # says it crashed. The lost worker's in-flight requests have no record.
        ended = "crashed"
        _say(f"loadgen: error: {lost.get()}; stopping the other workers")
        runner.stop()
        survivors = collector.worker_count - collector.worker_count // max(config.workers, 1)
        deadline = time.monotonic() + 10.0
        while len(collector.summaries) < survivors and time.monotonic() < deadline:
            gevent.sleep(0.1)
    elif (stop_requested.is_set() or collector.write_failed.is_set()) and (
        not collector.done.is_set()
    ):
        ended = "crashed" if collector.write_failed.is_set() else "interrupted"
        if collector.write_failed.is_set():
            _say(f"loadgen: error: {collector.write_error}; stopping the load")
        # Stopping the users interrupts each session, which cancels its in-flight requests
        # (recorded as `cancelled`) and still reports its records and summary.
        if isinstance(runner, MasterRunner):
            runner.stop()
        else:
            for greenlet in list(runner.user_greenlets):
                greenlet.kill(block=True, timeout=10)
        collector.done.wait(timeout=10.0)
    elif not collector.done.is_set():
        ended = "crashed"
    else:
        ended = collector.ended_when_done()
    if job is not None and job_greenlet is not None:
        # The profile ends when both the chat schedule and the job are done; the job's own
        # deadline (job_wait_seconds after the schedule) bounds this wait.
        if ended == "completed":
            job_limit = (
                float(spec.params["job_wait_seconds"])
                + 2 * float(spec.params["request_timeout_seconds"])
                + 30.0
            )
            gevent.wait([job_greenlet, stop_requested], timeout=job_limit, count=1)
            if stop_requested.is_set() and not job_greenlet.dead:
                ended = "interrupted"
        job_greenlet.kill(block=True, timeout=10)
        job.abandon()  # a no-op when the job ran to its end
    progress_greenlet.kill()
    load = collector.finalize(ended, batch_job=job.summary if job is not None else None)
    heartbeat_greenlet.kill()
    heartbeat.beat()  # the last count, after the last record
    progress.final(load)
    runner.quit()
    _reap(procs, timeout_seconds=10.0)
    if collector.write_error is not None:
        # The records up to the fault are on disk; load.json may not be: exit 5 with why.
        raise RuntimeError(collector.write_error)
    return load


def _say(message: str) -> None:
    """A line on stderr (load.log under batchgate), if it can still be written: on a full disk
    the message travels in the exit code and the gate's own check instead."""
    with contextlib.suppress(OSError):
        print(message, file=sys.stderr, flush=True)


def _run_job(job: BatchJob, collector: Any) -> None:
    # A local runner fires test_start (which sets the start time) from its spawning greenlet.
    if collector.started.wait(timeout=_WORKER_WAIT_SECONDS):
        job.run(collector.t0)


def _reap(procs: list[subprocess.Popen[bytes]], *, timeout_seconds: float) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _watch_workers(
    runner: Any, procs: list[subprocess.Popen[bytes]], lost: gevent.event.AsyncResult
) -> None:
    """Sets `lost` to why once a local worker process exits or Locust marks one missing
    (no heartbeat for a few seconds: a remote worker killed or cut off)."""
    while True:
        gevent.sleep(0.25)
        for proc in procs:
            code = proc.poll()
            if code is not None:
                lost.set(f"load worker process {proc.pid} exited with code {code} mid-run")
                return
        missing = list(getattr(runner.clients, "missing", []))
        if missing:
            lost.set(f"load worker {missing[0].id} stopped answering (missing)")
            return


def _wait_for_workers(
    runner: Any, count: int, procs: list[subprocess.Popen[bytes]], stop: gevent.event.Event
) -> None:
    deadline = time.monotonic() + _WORKER_WAIT_SECONDS
    while runner.worker_count < count:
        if stop.is_set():
            raise RuntimeError("interrupted while waiting for workers")
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a load worker process exited before connecting")
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {runner.worker_count} of {count} workers connected")
        gevent.sleep(0.05)
