"""batchgate's gate: observers, the gates.yaml language, the evaluator and the outputs.

`import gate` must not import torch, locust, `reference_server` or `loadgen` (docs/architecture.md;
tests/gate/test_import_boundaries.py pins this).
"""

from gate.baseline import Baseline, BaselineError, BaselineStore
from gate.errors import ExitCode
from gate.gates.file import validate_against_buckets
from gate.gates.reader import GatesFileError
from gate.gates.spec import GatesFile
from gate.outputs.files import read_verdicts, write_outputs
from gate.rundir.run import RunData, RunDirError, load_run
from gate.verdicts.evaluate import IncrementalEvaluator, evaluate
from gate.verdicts.verdict import Evaluation, Status, Verdict

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
