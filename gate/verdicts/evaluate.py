"""The gate evaluator's entry points: run data + gates -> verdicts, as a pure function (plus an
incremental form for `abort_on_fail`), and the exit code those verdicts give.

Owns `evaluate` (every gate, the run's notes, the inconclusive policy) and IncrementalEvaluator
(only confident failures of abort gates, after a grace period). The judgement rules live in
`gate.verdicts.assess` (per statistic kind) and `gate.verdicts.judge` (per gate and profile). It
does not read files (`gate.rundir.run`) or render (`gate.outputs`).
"""

from __future__ import annotations

from gate.errors import ExitCode
from gate.gates.spec import GatesFile
from gate.rundir.run import RunData
from gate.verdicts.context import BaselineLike
from gate.verdicts.judge import verdicts_for
from gate.verdicts.verdict import Evaluation, Status, Verdict

__all__ = ["IncrementalEvaluator", "evaluate", "exit_code_for"]


def _run_notes(run: RunData) -> tuple[str, ...]:
    notes = list(run.notes)
    for name, profile in run.profiles.items():
        notes.extend(f"{name}: {note}" for note in profile.notes)
    return tuple(notes)


def exit_code_for(verdicts: list[Verdict], *, inconclusive_policy: str) -> ExitCode:
    """Fail (1) beats no data (5) beats inconclusive (3, by policy) beats pass (exit-codes.md)."""
    blocking = [v.status for v in verdicts if v.blocking]
    if Status.FAIL in blocking:
        return ExitCode.FAILED
    if Status.NO_DATA in blocking or not verdicts:
        return ExitCode.NO_DATA
    if Status.INCONCLUSIVE in blocking and inconclusive_policy == "fail":
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASSED


def evaluate(
    run: RunData,
    gates_file: GatesFile,
    *,
    baseline: BaselineLike | None = None,
    inconclusive_policy: str | None = None,
) -> Evaluation:
    """Judge every gate of `gates_file` on `run`; pure (reads nothing, writes nothing)."""
    policy = inconclusive_policy or gates_file.settings.inconclusive
    if policy not in ("pass", "fail"):
        raise ValueError(f"inconclusive policy must be pass or fail, not {policy!r}")
    verdicts = verdicts_for(run, gates_file, gates_file.gates, baseline, partial=False)
    notes = _run_notes(run) + (
        () if verdicts else ("the gates file has no gates: nothing was checked",)
    )
    return Evaluation(
        verdicts=verdicts,
        exit_code=exit_code_for(verdicts, inconclusive_policy=policy),
        inconclusive_policy=policy,
        confidence=gates_file.settings.confidence,
        run_path=run.path,
        gates_file=gates_file.path,
        baseline=None if baseline is None else baseline.name,
        notes=notes,
    )


class IncrementalEvaluator:
    """Judges `abort_on_fail` gates on a run still in progress, to stop a doomed run early.

    Only a confident failure aborts: an exceedance share whose lower bound is past the limit, an
    interval wholly on the bad side, or a monotone statistic (max, peak, count, delta) already
    past its threshold — and never before the grace period has passed.
    """

    def __init__(self, gates_file: GatesFile, *, grace_seconds: float | None = None) -> None:
        self.gates_file = gates_file
        self.grace_seconds = (
            gates_file.settings.abort_grace_seconds if grace_seconds is None else grace_seconds
        )
        self.gates = tuple(g for g in gates_file.gates if g.abort_on_fail)

    def check(self, run: RunData, *, elapsed_seconds: float) -> list[Verdict]:
        """The failing abort gates (empty: carry on)."""
        if not self.gates or elapsed_seconds < self.grace_seconds:
            return []
        verdicts = verdicts_for(run, self.gates_file, self.gates, None, partial=True)
        return [v for v in verdicts if v.confident_failure]
