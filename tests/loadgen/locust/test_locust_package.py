"""The `loadgen.locust` package imports in a load process, and `import locust` inside it is Locust.

A package named `loadgen.locust` must not shadow the Locust library: every `import locust` in it
is absolute. Its modules are imported in a subprocess, as in the load process (they monkey-patch
the standard library through gevent).
"""

from __future__ import annotations

import subprocess
import sys

from lg_support import REPO

LOAD_PROCESS = [
    "loadgen.locust.runner",  # first, as in `python -m loadgen`: it patches before anything
    "loadgen.locust.options",
    "loadgen.locust.collector",
    "loadgen.locust.sink",
    "loadgen.locust.user",
    "loadgen.locust.install",
    "loadgen.worker",
    "loadgen.locustfile",
]


def test_load_process_modules_import_and_locust_is_the_library() -> None:
    code = (
        "import importlib, pathlib, sys\n"
        f"for name in {LOAD_PROCESS!r}:\n"
        "    importlib.import_module(name)\n"
        "import locust, locust.env, gevent.monkey\n"
        "from locust import User\n"
        "import loadgen.locust as ours\n"
        "assert locust is not ours, locust\n"
        "assert pathlib.Path(locust.__file__).parent.name == 'locust', locust.__file__\n"
        "assert 'loadgen' not in pathlib.Path(locust.__file__).parts, locust.__file__\n"
        "assert gevent.monkey.is_module_patched('socket')\n"
        "from loadgen.locust.user import DriverUser\n"
        "assert issubclass(DriverUser, User)\n"
        "assert sys.modules['loadgen.locust'] is ours\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
