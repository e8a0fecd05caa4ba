"""The calibration phase's probe step: the consistency probes, each answered alone.

Owns running the load generator's `consistency_probes` profile once per run, after the
calibration (fresh or reused: answers are not kept between runs, a model or its settings may
have changed), into `<run>/calibration/probes/`, where `gate.metrics.consistency` finds the alone
answers it compares each profile's probes with. It runs only when the gates judge a consistency
metric. A failed step is not the run's fault: the consistency gates then say `no data` with the
reason. It does not compare answers or know the probe set (the load generator's).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gate.gates.spec import GatesFile
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, ProfilePlan, resolve_plans
from gate.orchestrator.processes import ChildProcess
from gate.orchestrator.session import ProfileSession, SessionSettings
from gate.orchestrator.target import TargetClient

__all__ = ["PROBE_PROFILE", "answer_alone", "wants_probes"]

PROBE_PROFILE = "consistency_probes"
_METRICS = ("answer_mismatch_rate", "answer_divergence_position")


def wants_probes(gates_file: GatesFile) -> bool:
    return any(g.metric in _METRICS for g in gates_file.gates)


def answer_alone(
    *,
    run_dir: Path,
    gates_file: GatesFile,
    target: TargetClient,
    server: ChildProcess | None,
    has_step_records: bool,
    settings: SessionSettings,
    view: LiveView,
    children: list[ChildProcess],
) -> str | None:
    """Send every probe alone; returns why it could not (None when it did, or was not asked)."""
    if not wants_probes(gates_file):
        return None
    empty = dataclasses.replace(gates_file, profiles={}, gates=())
    try:
        (plan,) = resolve_plans([PROBE_PROFILE], empty, scale=settings.scale)
    except PlanError as exc:
        return f"consistency probes not answered alone: {exc}"
    view.message("batchgate: answering the consistency probes alone")
    session = ProfileSession(
        plan=ProfilePlan(name=PROBE_PROFILE, overrides=plan.overrides, params=plan.params),
        run_dir=run_dir / "calibration" / "probes",
        target=target,
        server=server,
        has_step_records=has_step_records,
        settings=settings,
        view=view,
        index=1,
        total=1,
        children=children,
        gates_file=empty,
    )
    outcome = session.run()
    if outcome.fault is not None:
        return f"consistency probes not answered alone: {outcome.fault.message}"
    return None
