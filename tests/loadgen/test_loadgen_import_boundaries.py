"""Loadgen's pure modules never import locust or gevent (they monkey-patch the stdlib), and no
loadgen module imports the gate or the reference server: the record format it shares with the
gate comes from `batchgate_records`, the package below both.

Every module of loadgen/ is listed either as pure or as a load-process module (the
`loadgen.locust` modules, the worker, the locustfile and the session, which import gevent or
locust), so a new module has to be placed on one side.
"""

from __future__ import annotations

import subprocess
import sys

from lg_support import REPO

PURE = [
    "loadgen",
    "loadgen.arrivals",
    "loadgen.shapes",
    "loadgen.lengths",
    "loadgen.profiles",
    "loadgen.plan",
    "loadgen.dataset",
    "loadgen.records",
    "loadgen.parquet",
    "loadgen.percentile",
    "loadgen.load_json",
    "loadgen.batch_job",
    "loadgen.job_params",
    "loadgen.sse",
    "loadgen.httpconn",
    "loadgen.client",
    "loadgen.config",
    "loadgen.cli",
    "loadgen.probe",
    "loadgen.probes",
    "loadgen.sampling_mix",
    "loadgen.progress",
    "loadgen.cpu",
    "loadgen.overrides",
    "loadgen.errors",
    "loadgen.locust",  # the package itself: its __init__ imports nothing
    "loadgen.conversations",
    "loadgen.catalogue",
    "loadgen.profile_spec",
    "loadgen.replay",
    "loadgen.prefix_text",
    "loadgen.traces",
    "loadgen.traces.fields",
    "loadgen.traces.formats",
    "loadgen.traces.request",
    "loadgen.traces.sessions",
    "loadgen.traces.window",
]
# Import gevent or locust (tests/loadgen/locust/test_locust_package.py imports the locust side);
# __main__ runs the CLI.
LOAD_PROCESS = [
    "loadgen.__main__",
    "loadgen.deadline",
    "loadgen.release",
    "loadgen.locust.collector",
    "loadgen.locust.heartbeat",
    "loadgen.locust.install",
    "loadgen.locust.options",
    "loadgen.locust.runner",
    "loadgen.locust.sink",
    "loadgen.locust.user",
    "loadgen.locustfile",
    "loadgen.session",
    "loadgen.worker",
]


def test_every_loadgen_module_is_listed_on_one_side() -> None:
    root = REPO / "loadgen"
    found = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert found == set(PURE) | set(LOAD_PROCESS)
    assert not set(PURE) & set(LOAD_PROCESS)


def test_pure_modules_do_not_import_locust_or_gevent() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_loadgen_meets_the_gate_only_in_the_shared_records_package() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE!r}:\n"
        "    importlib.import_module(name)\n"
        "import loadgen.parquet\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('gate', 'reference_server'))\n"
        "assert not bad, bad\n"
        "assert 'batchgate_records.schema' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
