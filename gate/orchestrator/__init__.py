"""What `batchgate run` and `batchgate sweep` orchestrate: child processes (the bundled server,
the load generator), one session per profile with its observers, the manifest, the live view and
the faults that end a run early. `gate.orchestrator.runner.execute` is the entry point."""

from gate.orchestrator.faults import FAULT_EXIT_CODE, RunFault
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, ProfilePlan, choose_profiles, resolve_plans
from gate.orchestrator.runner import RunConfig, RunResult, RunSetupError, execute, new_run_id

__all__ = [
    "FAULT_EXIT_CODE",
    "LiveView",
    "PlanError",
    "ProfilePlan",
    "RunConfig",
    "RunFault",
    "RunResult",
    "RunSetupError",
    "choose_profiles",
    "execute",
    "new_run_id",
    "resolve_plans",
]
