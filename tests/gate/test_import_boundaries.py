"""The gate's import rules, checked on the source (docs/architecture.md):

- `import gate` and every module under it import none of torch, locust, gevent, reference_server,
  loadgen (checked in a fresh interpreter so other tests' imports do not hide it); the one
  package below it that it may import from outside is `batchgate_records` (the request-record
  format it shares with loadgen), which itself imports neither gate nor loadgen;
- the stages import only downwards: leaves -> gates, calibration, observers -> rundir -> metrics
  -> verdicts -> outputs, baseline, compare, rollback -> orchestrator -> tune -> commands, cli;
- no import cycle anywhere in gate/, loadgen/ and batchgate_records/ (the same check as
  `python scripts/import_cycles.py gate loadgen batchgate_records`).
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import batchgate_records
import gate

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("torch", "locust", "gevent", "reference_server", "loadgen")
# Top-level packages of this repository a gate module may import besides gate itself.
SHARED_BELOW = ("batchgate_records",)

# Rank of each stage; a module may import its own stage's modules and lower ranks only.
STAGES: dict[str, int] = {
    "gate.errors": 0,
    "gate.json_shapes": 0,
    "gate.units": 0,
    "gate.stats": 0,
    "gate.sequential": 0,
    "gate.glossary": 0,
    "gate.runtime": 0,
    "gate.gates": 1,
    "gate.calibration": 1,
    "gate.observers": 1,
    "gate.rundir": 2,
    "gate.metrics": 3,
    "gate.verdicts": 4,
    "gate.outputs": 5,
    "gate.baseline": 5,
    "gate.compare": 5,
    "gate.rollback": 5,
    "gate.orchestrator": 6,
    "gate.tune": 7,
    "gate.commands": 8,
    "gate.cli": 8,
}
LEAF_ORDER = (
    "gate.errors",
    "gate.json_shapes",
    "gate.units",
    "gate.glossary",
    "gate.stats",
    "gate.sequential",
    "gate.runtime",
)


def _modules() -> list[str]:
    names = ["gate"]
    names += [m.name for m in pkgutil.walk_packages(gate.__path__, "gate.")]
    return sorted(names)


def _stage(module: str) -> str:
    for stage in sorted(STAGES, key=len, reverse=True):
        if module == stage or module.startswith(stage + "."):
            return stage
    raise AssertionError(f"{module} belongs to no stage: add it to STAGES")


def _imports(module: str) -> set[str]:
    path = Path(gate.__file__).parent.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gate"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gate"))
    known = set(_modules())
    return {name for name in found if name in known and name != "gate"}


def _top_level_imports(module: str) -> set[str]:
    path = Path(gate.__file__).parent.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def test_gate_imports_none_of_the_heavy_or_sibling_packages():
    code = (
        "import importlib, sys\n"
        f"for name in {_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == ""


def test_gate_imports_only_itself_and_the_shared_records_package_of_this_repository():
    ours = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}
    wrong = []
    for module in _modules():
        for top in _top_level_imports(module) & ours:
            if top != "gate" and top not in SHARED_BELOW:
                wrong.append(f"{module} imports {top}")
    assert not wrong, "\n".join(wrong)


def test_the_shared_records_package_imports_neither_product():
    # Nor, at import, the libraries its functions use: the load process and `import gate` stay
    # light. Function-level imports of a product are found on the source.
    heavy = (*FORBIDDEN, "gate", "pyarrow", "numpy", "duckdb")
    code = (
        "import importlib, pkgutil, sys\n"
        "import batchgate_records as package\n"
        "for m in pkgutil.walk_packages(package.__path__, 'batchgate_records.'):\n"
        "    importlib.import_module(m.name)\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == ""
    wrong = []
    for path in sorted(Path(batchgate_records.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            wrong += [f"{path.name} imports {n}" for n in names
                      if n.split(".")[0] in (*FORBIDDEN, "gate")]  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_every_gate_module_belongs_to_a_stage():
    for module in _modules():
        if module != "gate":
            _stage(module)


def test_stages_import_only_downwards():
    wrong = []
    for module in _modules():
        if module == "gate":
            continue  # the package's public surface may name anything
        stage = _stage(module)
        for imported in _imports(module):
            other = _stage(imported)
            if other == stage:
                continue
            same_rank_leaves = STAGES[other] == STAGES[stage] == 0 and LEAF_ORDER.index(
                other
            ) < LEAF_ORDER.index(stage)
            if STAGES[other] >= STAGES[stage] and not same_rank_leaves:
                wrong.append(f"{module} ({stage}) imports {imported} ({other})")
    assert not wrong, "\n".join(wrong)


def test_gate_loadgen_and_the_records_package_have_no_import_cycle():
    script = str(REPO / "scripts" / "import_cycles.py")
    result = subprocess.run(
        [sys.executable, script, "gate", "loadgen", "batchgate_records"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cycle_checker_finds_a_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\ny = 1\n")
    (package / "b.py").write_text("def f():\n    from pkg import a\nx = 2\n")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "import_cycles.py"), "pkg"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "pkg.a" in result.stdout and "pkg.b" in result.stdout
