"""batchgate's gate: observers, the gates.yaml language, the evaluator and the outputs.

`import gate` must not import torch, locust, `reference_server` or `loadgen` (DESIGN.md §3;
tests/gate/test_import_boundaries.py pins this).
"""

from gate.baseline import Baseline, BaselineError, BaselineStore
from gate.evaluate import IncrementalEvaluator, evaluate
from gate.exit_codes import ExitCode
from gate.gates_file import GatesFile, GatesFileError, validate_against_buckets
from gate.rundir import RunData, RunDirError, load_run
from gate.verdicts import Evaluation, Status, Verdict, read_verdicts, write_outputs

__all__ = [
    "Baseline",
    "BaselineError",
    "BaselineStore",
    "Evaluation",
    "ExitCode",
    "GatesFile",
    "GatesFileError",
    "IncrementalEvaluator",
    "RunData",
    "RunDirError",
    "Status",
    "Verdict",
    "evaluate",
    "load_run",
    "read_verdicts",
    "validate_against_buckets",
    "write_outputs",
]
