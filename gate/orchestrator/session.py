"""One profile of a run: observers up, load process, watch for faults, drain, observers down.

Owns the per-profile sequence of docs/architecture.md — a `start` scrape, the sampler / scraper /
step fetcher threads, `python -m loadgen` as a child process (never locust in this process), the
watch loop (load finished? target alive? live view), the `end` scrape, the bounded wait until
the target has nothing in flight, the `drain` scrape (the KV-leak check) — and the outcome:
completed, stopped early by an `abort_on_fail` gate (`abort.json`, then the same end scrape and
drain), or the fault that ended it. Every artifact goes into `<run>/<profile>/`
(docs/records.md). It stops what it started on every path, Ctrl-C included. It does not
evaluate gates or start the server.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.gates.spec import GatesFile
from gate.observers.nvml_sampler import NvmlSampler, SamplerConfig
from gate.observers.observer import PeriodicObserver
from gate.observers.prom_scraper import PromScraper, ScraperConfig
from gate.observers.step_fetcher import StepFetcher, StepFetcherConfig
from gate.orchestrator.abort_watch import AbortWatch
from gate.orchestrator.faults import RunFault, write_failure
from gate.orchestrator.live import LiveView
from gate.orchestrator.liveness import Liveness, read_received_bytes
from gate.orchestrator.plan import ProfilePlan
from gate.orchestrator.processes import ChildProcess, python_argv, start_child
from gate.orchestrator.target import TargetClient
from gate.rundir.abort import AbortRecord, write_abort

__all__ = ["ProfileOutcome", "ProfileSession", "SessionSettings"]


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    scale: str
    api_key: str | None = None
    admin_token: str | None = None
    sampler_hz: float = 20.0  # RSS / NVML samples per second; 20 Hz costs < 1% of a core
    scrape_interval_seconds: float = 1.0
    watch_interval_seconds: float = 0.25
    # A --target is dead when it refuses connections this many probes in a row (a second
    # apart), or when /health fails this many times in a row AND no answer byte reached the
    # load generator for `no_progress_seconds_for_dead` (docs/run.md: busy is not dead).
    health_failures_for_dead: int = 3
    no_progress_seconds_for_dead: float = 30.0
    drain_timeout_seconds: float = 30.0
    load_stop_timeout_seconds: float = 20.0
    load_workers: int = 1  # Locust worker processes of the load generator (`--workers`)
    # `--workers auto`: the capacity sweep may double `load_workers` up to this many whenever
    # the load generator saturates (gate.orchestrator.load_workers); None: a fixed count.
    max_load_workers: int | None = None
    # Request fields the target refuses (TargetInfo.refused_fields): the load generator leaves
    # them out of every request (`--drop-fields`).
    drop_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "sampler_hz",
            "scrape_interval_seconds",
            "watch_interval_seconds",
            "drain_timeout_seconds",
            "load_stop_timeout_seconds",
            "no_progress_seconds_for_dead",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.health_failures_for_dead < 1 or self.load_workers < 1:
            raise ValueError("health_failures_for_dead and load_workers must be >= 1")
        if self.max_load_workers is not None and self.max_load_workers < self.load_workers:
            raise ValueError("max_load_workers must be >= load_workers")


@dataclass(frozen=True, kw_only=True)
class ProfileOutcome:
    name: str
    fault: RunFault | None
    load: dict[str, Any] | None
    load_exit_code: int | None
    drained: bool | None
    observers: dict[str, Any] = field(default_factory=dict)
    aborted: AbortRecord | None = None  # an abort_on_fail gate stopped the load early

    @property
    def completed(self) -> bool:
        return self.fault is None


class ProfileSession:
    def __init__(
        self,
        *,
        plan: ProfilePlan,
        run_dir: Path,
        target: TargetClient,
        server: ChildProcess | None,
        has_step_records: bool,
        settings: SessionSettings,
        view: LiveView,
        index: int,
        total: int,
        children: list[ChildProcess] | None = None,
        gates_file: GatesFile | None = None,
    ) -> None:
        self.plan = plan
        self.directory = run_dir / plan.name
        self.target = target
        self.server = server
        self.has_step_records = has_step_records
        self.settings = settings
        self.view = view
        self.index, self.total = index, total
        self._observers: list[PeriodicObserver] = []
        self._scraper: PromScraper | None = None
        self._load: ChildProcess | None = None
        self.gates_file = gates_file  # its abort_on_fail gates are watched during the load
        self._abort_watch: AbortWatch | None = None
        self._aborted: AbortRecord | None = None
        self._liveness: Liveness | None = None
        # The run's registry of children: whoever cleans up last can still stop this load.
        self._children = children if children is not None else []

    # -- the sequence ---------------------------------------------------------------------

    def run(self) -> ProfileOutcome:
        self.directory.mkdir(parents=True, exist_ok=True)
        overrides_path = self.directory / "profile_overrides.json"
        overrides_path.write_text(json.dumps(self.plan.overrides, indent=2) + "\n", "utf-8")
        fault: RunFault | None = None
        drained: bool | None = None
        summaries: dict[str, Any] = {}
        try:
            self._start_observers()
            self._load = start_child(
                "load generator",
                self._load_argv(overrides_path),
                log_path=self.directory / "load.log",
                # batchgate killed outright: the load still stops politely, records and
                # load.json (ended: interrupted) written.
                parent_death_signal=signal.SIGINT,
            )
            self._children.append(self._load)
            self._abort_watch = self._new_abort_watch()
            self.view.begin(
                profile=self.plan.name,
                directory=self.directory,
                index=self.index,
                total=self.total,
                duration_seconds=self.plan.duration_seconds,
            )
            fault = self._watch()
            self.view.end()
            busy = None if fault or not self._liveness else self._liveness.busy_line(self.plan.name)
            if busy is not None:
                self.view.message(busy)
            if fault is None and self._aborted is not None:
                self._stop_aborted_load(self._aborted)
            if fault is None:
                assert self._scraper is not None
                self._scraper.scrape_now("end")
                drained = self._wait_drained()
                if drained is False:
                    self.view.message(
                        f"batchgate: {self.plan.name}: the target still had requests in flight "
                        f"after {self.settings.drain_timeout_seconds:g} s; the KV-leak check "
                        "reads the drain scrape as it is"
                    )
                self._scraper.scrape_now("drain")
        finally:
            self.view.end()
            if self._load is not None and self._load.alive:
                # SIGINT: the load generator cancels in-flight requests and still writes
                # load.json (ended: interrupted) before it exits.
                self._load.stop(
                    first_signal=signal.SIGINT,
                    timeout_seconds=self.settings.load_stop_timeout_seconds,
                )
            elif self._load is not None:
                self._load.stop(timeout_seconds=1.0)  # reap stragglers of its group
            summaries = self._stop_observers()
            if self._liveness is not None:
                summaries["liveness"] = self._liveness.summary()
        load = _read_load(self.directory / "load.json")
        if fault is None and self._aborted is None:
            fault = self._judge_load(load)
        return ProfileOutcome(
            name=self.plan.name,
            fault=fault,
            load=load,
            load_exit_code=None if self._load is None else self._load.poll(),
            drained=drained,
            observers=summaries,
            aborted=self._aborted if fault is None else None,
        )

    def _load_argv(self, overrides_path: Path) -> list[str]:
        args = [
            "--target",
            self.target.url,
            "--profile",
            self.plan.name,
            "--out",
            str(self.directory),
            "--scale",
            self.settings.scale,
            "--profile-overrides-json",
            str(overrides_path),
        ]
        if self.settings.api_key:
            args += ["--api-key", self.settings.api_key]
        if self.settings.load_workers > 1:
            args += ["--workers", str(self.settings.load_workers)]
        if self.settings.drop_fields:
            args += ["--drop-fields", ",".join(self.settings.drop_fields)]
        return python_argv("loadgen", args)

    def _watch(self) -> RunFault | None:
        """Until the load process exits: refresh the view, notice a dead target."""
        load = self._load
        assert load is not None
        next_health = 0.0
        if self.server is None:
            self._liveness = Liveness(
                failures_for_dead=self.settings.health_failures_for_dead,
                no_progress_seconds=self.settings.no_progress_seconds_for_dead,
                started_at=time.monotonic(),
            )
        while load.alive:
            time.sleep(self.settings.watch_interval_seconds)
            self.view.refresh()
            if self.server is not None:
                code = self.server.poll()
                if code is not None:
                    return RunFault(
                        ended="target_died",
                        profile=self.plan.name,
                        reason=f"the server process exited with code {code} "
                        f"(log: {self.server.log_path})",
                    )
            elif self._liveness is not None and time.monotonic() >= next_health:
                next_health = time.monotonic() + 1.0
                probe = self.target.probe_health()
                now = time.monotonic()
                self._liveness.progress(read_received_bytes(self.directory), now)
                dead = self._liveness.observe(probe, now)
                if dead is not None:
                    return RunFault(
                        ended="target_died",
                        profile=self.plan.name,
                        reason=f"{self.target.url}: {dead}",
                    )
            if self._abort_watch is not None:
                self._aborted = self._abort_watch.poll()
                if self._aborted is not None:
                    return None
        if self.server is not None and self.server.poll() is not None:
            return RunFault(
                ended="target_died",
                profile=self.plan.name,
                reason=f"the server process exited with code {self.server.poll()}",
            )
        return None

    def _new_abort_watch(self) -> AbortWatch | None:
        if self.gates_file is None:
            return None
        warmup = self.plan.params.get("warmup_seconds")
        watch = AbortWatch(
            gates_file=self.gates_file,
            profile=self.plan.name,
            directory=self.directory,
            warmup_seconds=float(warmup) if isinstance(warmup, (int, float)) else None,
            started_at=time.monotonic(),
        )
        return watch if watch.active else None

    def _stop_aborted_load(self, record: AbortRecord) -> None:
        """Keep the deciding check's view (abort.json), then stop the load politely: SIGINT,
        so it cancels what is in flight and still writes load.json (ended: interrupted)."""
        write_abort(self.directory, record)
        self.view.message(
            f"batchgate: confident failure of {record.describe()}: stopping the run early "
            "(abort_on_fail)"
        )
        assert self._load is not None
        self._load.stop(
            first_signal=signal.SIGINT, timeout_seconds=self.settings.load_stop_timeout_seconds
        )

    def _judge_load(self, load: dict[str, Any] | None) -> RunFault | None:
        code = None if self._load is None else self._load.poll()
        log = self.directory / "load.log"
        if load is None:
            problem = _write_problem(self.directory)
            unwritable = None if problem is None else write_failure(problem, profile=self.plan.name)
            if unwritable is not None:  # the load stopped: its records could not be kept
                return unwritable
            return RunFault(
                ended="load_crashed",
                profile=self.plan.name,
                reason=f"the load process exited with code {code} and wrote no "
                f"load.json (log: {log}){_tail(log)}",
            )
        if load.get("ended") != "completed" or code not in (0, None):
            return RunFault(
                ended="load_crashed",
                profile=self.plan.name,
                reason=f"the load process ended {load.get('ended')!r} with exit "
                f"code {code} (log: {log}){_tail(log)}",
            )
        return None

    def _wait_drained(self) -> bool | None:
        """True once running + waiting is 0; None when the target does not report it."""
        deadline = time.monotonic() + self.settings.drain_timeout_seconds
        while True:
            in_flight = self.target.in_flight()
            if in_flight is None:
                return None
            if in_flight == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    # -- observers ------------------------------------------------------------------------

    def _start_observers(self) -> None:
        d, s = self.directory, self.settings
        self._scraper = PromScraper(
            ScraperConfig(
                target_url=self.target.url,
                out_path=d / "scrapes.jsonl",
                interval_seconds=s.scrape_interval_seconds,
                api_key=s.api_key,
            )
        )
        self._scraper.scrape_now("start")
        observers: list[PeriodicObserver] = [self._scraper]
        observers.append(
            NvmlSampler(
                SamplerConfig(
                    out_path=d / "gpu.jsonl",
                    pid=None if self.server is None else self.server.pid,
                    hz=s.sampler_hz,
                )
            )
        )
        if self.has_step_records:
            observers.append(
                StepFetcher(
                    StepFetcherConfig(
                        target_url=self.target.url,
                        out_path=d / "steps.jsonl",
                        admin_token=s.admin_token,
                    )
                )
            )
        for observer in observers:
            observer.start()
            self._observers.append(observer)

    def _stop_observers(self) -> dict[str, Any]:
        summaries: dict[str, Any] = {}
        for observer in reversed(self._observers):
            try:
                summaries[observer.name] = observer.stop().to_dict()
            except Exception as exc:  # a broken observer must not hide the run's outcome
                summaries[observer.name] = {"error": f"{type(exc).__name__}: {exc}"}
        self._observers.clear()
        if self._scraper is not None and "prom_scraper" not in summaries:
            summaries["prom_scraper"] = self._scraper.stop().to_dict()
        return summaries


def _read_load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_problem(directory: Path) -> OSError | None:
    """Why nothing can be written in `directory` now (a full disk), or None when it can."""
    probe = directory / ".batchgate-write-probe"
    try:
        with probe.open("wb") as f:
            f.write(b"x" * 4096)  # a page: a full tmpfs refuses it, an empty file it may not
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return exc
    finally:
        probe.unlink(missing_ok=True)
    return None


def _tail(path: Path, lines: int = 5) -> str:
    """The log's last lines, and before them any `loadgen: error:` line they do not hold: the
    load's own reason for stopping must reach the message, however much followed it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    last = text[-lines:]
    errors = [line for line in text[:-lines] if line.startswith("loadgen: error:")][-3:]
    shown = errors + last
    return ("\n  " + "\n  ".join(shown)) if shown else ""
