"""One `batchgate tune` session: the target for the whole search, its calibration, the search.

Owns starting the target once (the bundled server, a `--target`, or the `--server-cmd` on the
reference settings for the calibration), the one calibration every candidate is judged against
(taken with the reference settings: the bundled server swaps to `safe` itself, a live `--target`
gets `safe` for the calibration and its own settings back, a `--server-cmd` is started on
`--reference`), the incumbent's settings, the knob space and the search; stopping what it
started. It does not parse arguments or print (`gate.commands.tune`), nor write tune.json or
the winner's preset (`gate.outputs.tune_json`, `gate.tune.preset`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.calibration.content import CALIBRATION_FILE, Calibration
from gate.calibration.json_io import read_calibration
from gate.errors import ExitCode, UsageError
from gate.gates.spec import GatesFile
from gate.orchestrator.bundled_server import BundledServer, ServerOptions, start_bundled_server
from gate.orchestrator.live import LiveView
from gate.orchestrator.live_preset import apply_live_preset, restore_settings
from gate.orchestrator.load_workers import WorkerCount
from gate.orchestrator.plan import ProfilePlan
from gate.orchestrator.preset_flags import REFERENCE_PRESET, server_flags
from gate.orchestrator.processes import ChildProcess, ProcessError, start_child, wait_for_health
from gate.orchestrator.run_config import RunConfig
from gate.orchestrator.runner import execute
from gate.orchestrator.target import TargetClient
from gate.tune.candidate import Candidate
from gate.tune.objective import Objective
from gate.tune.runner import CandidateRunner, command_argv, free_port
from gate.tune.search import TuneSearch, rungs_from
from gate.tune.space import KnobSpace, flatten_settings

__all__ = ["TuneOutcome", "TuneRequest", "TuneSession"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneRequest:
    profile: str
    scale: str
    gates_file: GatesFile  # with the monitor gates tune reads
    gates_text: str
    plans: tuple[ProfilePlan, ...]
    knobs: list[tuple[str, tuple[Any, ...] | None]]  # gate.tune.space.parse_knobs
    objective: Objective
    overrides: dict[str, dict[str, Any]]
    budget_seconds: float
    preset_name: str | None = None  # the bundled server's start preset (the incumbent)
    preset: Mapping[str, Any] | None = None
    reference: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # --server-cmd only
    target_url: str | None = None
    server_cmd: str | None = None
    server_args: tuple[str, ...] = ()
    api_key: str | None = None
    admin_token: str | None = None
    workers: WorkerCount = 1
    calibration: str = "fresh"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneOutcome:
    search: TuneSearch
    winner: Candidate | None
    space: KnobSpace
    calibration: Calibration


class TuneSession:
    def __init__(self, request: TuneRequest, tune_dir: Path, view: LiveView) -> None:
        self.request, self.tune_dir, self.view = request, tune_dir, view
        self.server: BundledServer | None = None
        self.reference_child: ChildProcess | None = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(timeout_seconds=15.0)
            self.server = None
        if self.reference_child is not None:
            self.reference_child.stop(timeout_seconds=30.0)
            self.reference_child = None

    def run(self) -> TuneOutcome:
        r = self.request
        url = self._start()
        base = RunConfig(
            gates_file=r.gates_file,
            gates_text=r.gates_text,
            plans=r.plans,
            scale=r.scale,
            run_dir=self.tune_dir / "calibration-run",
            target_url=None if self.server is not None else url,
            attached_server=self.server,
            # The incumbent's preset (bundled): the calibration switches to `safe` to measure.
            preset_name=r.preset_name if self.server is not None else None,
            preset=r.preset if self.server is not None else None,
            api_key=r.api_key,
            admin_token=r.admin_token,
            load_workers=r.workers,
            server_args=r.server_args,
            # "Passes with confidence": an inconclusive gate is never a pass here, whatever the
            # gates file's own policy (it buys the candidate more samples instead).
            inconclusive_policy="fail",
            write_report=False,
            calibration=r.calibration,
            calibrate_only=True,
        )
        incumbent = self._incumbent(url)
        path = self._calibrate(base, url)
        calibration = read_calibration(path)
        if self.reference_child is not None:  # candidates start servers of their own
            self.reference_child.stop(timeout_seconds=30.0)
            self.reference_child = None
        lone_tpot = calibration.lone("tpot")
        tpot = None if lone_tpot is None else lone_tpot.p50
        space = KnobSpace.build(r.knobs, incumbent=incumbent, unloaded_tpot_seconds=tpot)
        runner = CandidateRunner(
            base=dataclasses.replace(
                base,
                calibrate_only=False,
                calibration=str(path),
                preset=None,
                preset_name=None,
                target_url=url,
            ),
            profile=r.profile,
            overrides=r.overrides,
            tune_dir=self.tune_dir,
            view=self.view,
            server=self.server,
            url=url if r.server_cmd is None or r.target_url else None,
            server_cmd=r.server_cmd,
            start_preset=r.preset if self.server is not None else None,
        )
        search = TuneSearch(
            space=space,
            incumbent=incumbent,
            rungs=rungs_from(r.scale),
            higher_is_better=r.objective.higher_is_better,
            budget_seconds=r.budget_seconds,
            measure=runner,
            view=self.view,
        )
        try:
            winner = search.search()
        except KeyboardInterrupt:
            search.ended = "interrupted"
            winner = None
        return TuneOutcome(search=search, winner=winner, space=space, calibration=calibration)

    def _start(self) -> str:
        """The URL the calibration measures: the bundled server (started once), the --target,
        or the --server-cmd started on the reference settings."""
        r = self.request
        if r.server_cmd is not None:
            return self._start_command()
        if r.target_url is not None:
            return r.target_url
        self.view.message("batchgate tune: starting the bundled reference server")
        options = ServerOptions(
            preset_flags=tuple(server_flags(r.preset or {})), extra_args=tuple(r.server_args)
        )
        try:
            self.server = start_bundled_server(self.tune_dir, options)
        except ProcessError as exc:
            raise UsageError(f"the bundled server did not start: {exc}", ExitCode.NO_DATA) from exc
        return self.server.url

    def _start_command(self) -> str:
        r = self.request
        assert r.server_cmd is not None
        port = free_port()
        settings = {**self._command_incumbent(), **r.reference}
        argv = command_argv(r.server_cmd, settings, port)
        url = r.target_url or f"http://127.0.0.1:{port}"
        if not r.reference:
            self.view.message(
                "batchgate tune: calibrating on the incumbent settings (no --reference): gates "
                "relative to the calibration compare each candidate with them"
            )
        self.view.message(f"batchgate tune: starting the calibration server: {' '.join(argv)}")
        try:
            self.reference_child = start_child(
                "target server", argv, log_path=self.tune_dir / "calibration-server.log"
            )
            wait_for_health(url, timeout_seconds=600.0, child=self.reference_child)
        except ProcessError as exc:
            raise UsageError(f"the server command did not start: {exc}", ExitCode.NO_DATA) from exc
        return url

    def _command_incumbent(self) -> dict[str, Any]:
        """With --server-cmd, the first value of each knob's --values."""
        incumbent = {}
        for path, given in self.request.knobs:
            if given is None:
                raise UsageError(
                    f"--server-cmd: give --values {path}=... (the first is the incumbent)"
                )
            incumbent[path] = given[0]
        return incumbent

    def _incumbent(self, url: str) -> dict[str, Any]:
        r = self.request
        if r.server_cmd is not None:
            return self._command_incumbent()
        batching = TargetClient(url, api_key=r.api_key, admin_token=r.admin_token).batching()
        if batching is None:
            raise UsageError(
                f"{url} has no /admin/batching to change settings live; give --server-cmd to "
                "restart it for every candidate"
            )
        start = r.preset if self.server is not None else None
        return flatten_settings(batching, [path for path, _ in r.knobs], start)

    def _calibrate(self, base: RunConfig, url: str) -> Path:
        """One calibration for the whole search, with the reference settings: the bundled
        server swaps to `safe` itself (the run's preset machinery); a live --target gets the
        gates file's `safe` preset for the calibration and its own settings back after it."""
        r = self.request
        restore = None
        safe = r.gates_file.presets.get(REFERENCE_PRESET)
        if self.server is None and r.server_cmd is None and safe:
            self.view.message(f"batchgate tune: calibrating {url} on the {REFERENCE_PRESET} preset")
            restore = apply_live_preset(url, REFERENCE_PRESET, safe, admin_token=r.admin_token)
        try:
            calibrated = execute(base, self.view)
        finally:
            if restore is not None:
                self.view.message(restore_settings(url, restore, admin_token=r.admin_token))
        path = base.run_dir / CALIBRATION_FILE
        if calibrated.exit_code != ExitCode.PASSED or not path.is_file():
            reason = calibrated.fault.message if calibrated.fault is not None else "no calibration"
            raise UsageError(f"could not calibrate the target: {reason}", ExitCode.NO_DATA)
        return path
