"""Loadgen's pure modules never import locust or gevent (they monkey-patch the stdlib)."""

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
    "loadgen.columns",
    "loadgen.metrics",
    "loadgen.load_json",
    "loadgen.sse",
    "loadgen.httpconn",
    "loadgen.client",
    "loadgen.config",
    "loadgen.cli",
    "loadgen.probe",
    "loadgen.progress",
    "loadgen.cpu",
    "loadgen.overrides",
]


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
