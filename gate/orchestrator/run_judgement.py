"""The end of a run: its records judged, the outputs written, the result it returns.

Owns reading the run directory back (`load_run`), evaluating it against the run's suite (the
gates left out said in the notes, a `--target` named as the rollback target), writing
verdicts.json, junit.xml and summary.md (a full disk is the run's fault, never a traceback, and
the verdicts still reach the terminal) and report.html (its failure never hides a verdict), and
the `RunResult` with the exit code: the fault's when there is one, else the evaluation's. It
does not run anything (`gate.orchestrator.runner`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gate.errors import ExitCode
from gate.orchestrator.faults import FAULT_EXIT_CODE, RunFault, write_failure
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.suite import Suite
from gate.orchestrator.target import TargetInfo
from gate.outputs.files import write_outputs
from gate.rundir.abort import AbortRecord
from gate.rundir.run import RunDirError, load_run
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Evaluation

__all__ = ["abort_message", "judge"]


def abort_message(record: AbortRecord) -> str:
    return (
        f"stopped early by abort_on_fail: confident failure of {record.describe()}; "
        "later profiles were not run"
    )


def judge(
    config: RunConfig,
    *,
    suite: Suite,
    info: TargetInfo | None,
    aborted: AbortRecord | None,
    fault: RunFault | None,
) -> RunResult:
    """Evaluate what the run left in its directory, write the outputs, and say how it ended."""
    notes: list[str] = []
    if aborted is not None and fault is None:
        notes.append(abort_message(aborted))
    try:
        data = load_run(config.run_dir)
    except RunDirError as exc:
        notes.append(f"nothing to evaluate: {exc}")
        return RunResult(
            run_dir=config.run_dir,
            exit_code=FAULT_EXIT_CODE,
            fault=fault,
            evaluation=None,
            target=info,
            notes=tuple(notes),
            aborted=aborted,
        )
    evaluation = evaluate(
        data,
        suite.gates_file,
        baseline=config.baseline,
        inconclusive_policy=config.inconclusive_policy,
    )
    if suite.skipped:
        skipped = "; ".join(suite.skipped)
        evaluation = dataclasses.replace(
            evaluation, notes=(*evaluation.notes, f"gates not judged in this run: {skipped}")
        )
    if config.target_url is not None:
        evaluation = dataclasses.replace(evaluation, rollback_target=config.target_url)
    try:
        write_outputs(config.run_dir, evaluation)
    except OSError as exc:  # the verdicts still reach the terminal and the exit code
        unwritten = write_failure(exc)
        if unwritten is None:
            raise
        notes.append(f"verdicts.json, junit.xml and summary.md not all written: {exc}")
        fault = fault or unwritten
    if config.write_report and (fault is None or fault.ended != "write_failed"):
        notes.extend(_report(config.run_dir, evaluation, data))
    code = FAULT_EXIT_CODE if fault is not None else evaluation.exit_code
    return RunResult(
        run_dir=config.run_dir,
        exit_code=ExitCode(code),
        fault=fault,
        evaluation=evaluation,
        target=info,
        notes=tuple(notes),
        aborted=aborted if fault is None else None,
    )


def _report(run_dir: Path, evaluation: Evaluation, data: Any) -> Sequence[str]:
    from gate.outputs.html.report import write_report

    try:
        write_report(run_dir, evaluation, run=data)
    except Exception as exc:  # the report is a convenience: its failure must not hide verdicts
        return (f"report.html not written: {type(exc).__name__}: {exc}",)
    return ()
