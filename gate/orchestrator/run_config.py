"""What one `batchgate run` is asked to do (RunConfig) and what it gives back (RunResult).

Owns the value objects between the commands and the orchestrator: the plans, the target or the
bundled server's options, the preset, the calibration mode, the session settings; and the run
directory, exit code, fault, evaluation and abort record of a finished run. It does not run
anything (`gate.orchestrator.runner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gate.calibration.procedure import CalibrationSpec
from gate.errors import ExitCode
from gate.gates.spec import GatesFile
from gate.orchestrator.bundled_server import BundledServer, ServerOptions
from gate.orchestrator.faults import RunFault
from gate.orchestrator.load_workers import WorkerCount
from gate.orchestrator.plan import ProfilePlan
from gate.orchestrator.session import SessionSettings
from gate.orchestrator.target import TargetInfo
from gate.rundir.abort import AbortRecord
from gate.verdicts.verdict import Evaluation

__all__ = ["RunConfig", "RunResult"]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    gates_file: GatesFile
    gates_text: str  # the gates file as written: copied into the run directory
    plans: tuple[ProfilePlan, ...]
    scale: str
    run_dir: Path
    target_url: str | None = None
    preset_name: str | None = None
    preset: Mapping[str, Any] | None = None
    server_args: tuple[str, ...] = ()
    baseline: Any = None  # gate.baseline.Baseline
    inconclusive_policy: str | None = None
    api_key: str | None = None
    admin_token: str | None = None
    server_options: ServerOptions = field(default_factory=ServerOptions)
    session: SessionSettings | None = None
    load_workers: WorkerCount = 1  # a number, or "auto" (gate.orchestrator.load_workers)
    write_report: bool = True
    # "fresh": measure now (the first phase of every run); "auto": reuse a saved calibration
    # of the same target, settings and hardware from `calibration_store`, else measure and save
    # it; "off": none (relative values then stop the run); else a calibration.json to reuse.
    calibration: str = "fresh"
    calibration_spec: CalibrationSpec = field(default_factory=CalibrationSpec)
    calibration_store: Path = Path(".batchgate/calibrations")
    keep_preset: bool = False  # leave a --target on the preset after the run
    calibrate_only: bool = False  # `batchgate calibrate`: stop after the calibration phase
    # A bundled server someone else started and stops (`batchgate sweep`: one server for every
    # point); the run measures it like its own (the sampler gets its PID) but leaves it running.
    attached_server: BundledServer | None = None

    def __post_init__(self) -> None:
        if not self.plans:
            raise ValueError("a run needs at least one profile")
        if (self.preset is None) != (self.preset_name is None):
            raise ValueError("preset and preset_name go together")


@dataclass(frozen=True, kw_only=True)
class RunResult:
    run_dir: Path
    exit_code: ExitCode
    fault: RunFault | None
    evaluation: Evaluation | None
    target: TargetInfo | None
    notes: tuple[str, ...] = ()
    aborted: AbortRecord | None = None  # an abort_on_fail gate stopped the run early
