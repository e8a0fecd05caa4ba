"""`import gate` (and every gate-core module) must not import torch, locust, reference_server or
loadgen (DESIGN.md §3). Checked in a fresh interpreter so other tests' imports do not hide it."""

import subprocess
import sys

FORBIDDEN = ("torch", "locust", "gevent", "reference_server", "loadgen")
MODULES = (
    "gate",
    "gate.assess",
    "gate.baseline",
    "gate.commands.baseline",
    "gate.commands.check",
    "gate.derive",
    "gate.derive_client",
    "gate.derive_server",
    "gate.evaluate",
    "gate.gate_definition",
    "gate.gates_file",
    "gate.gates_model",
    "gate.gates_yaml",
    "gate.glossary",
    "gate.judge",
    "gate.measurements",
    "gate.outputs.junit",
    "gate.outputs.summary",
    "gate.outputs.terminal",
    "gate.presets_schema",
    "gate.records",
    "gate.request_mirror",
    "gate.rundir",
    "gate.stats",
    "gate.units",
    "gate.verdicts",
    "gate.window",
)


def test_gate_imports_none_of_the_heavy_or_sibling_packages():
    code = (
        "import importlib, sys\n"
        f"for name in {MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == ""
