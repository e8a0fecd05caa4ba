"""scripts/mutation's default test selection (scripts/mutation_tests.py): a module's tests are
found wherever they live -- direct imports, package re-exports, tests/ helpers and conftest.py,
the test_<name>* files -- and, when nothing imports it, through the nearest importing module."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _selector():
    spec = importlib.util.spec_from_file_location(
        "mutation_tests", REPO / "scripts/mutation_tests.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_module_is_found_through_every_kind_of_import(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from .core import thing\nfrom pkg.sub.other import helper\n",
        "pkg/sub/core.py": "thing = 1\n",
        "pkg/sub/other.py": "helper = 2\n",
        "pkg/user.py": "from pkg.sub.core import thing\n",
        "tests/a/test_direct.py": "import pkg.sub.core\n",
        "tests/a/test_from_package.py": "from pkg.sub import core\n",
        "tests/a/test_from_module.py": "from pkg.sub.core import thing\n",
        "tests/a/test_reexport.py": "from pkg.sub import thing\n",
        "tests/a/support_helper.py": "from pkg.sub.core import thing\n",
        "tests/a/test_via_helper.py": "from support_helper import thing\n",
        "tests/b/conftest.py": "import pkg.sub.core\n",
        "tests/b/test_via_conftest.py": "x = 1\n",
        "tests/c/test_core_extra.py": "x = 1\n",
        "tests/c/test_other_only.py": "from pkg.sub import helper\n",
        "tests/c/test_unrelated.py": "import json\n",
    })  # fmt: skip
    chosen = dict(_selector().select(tmp_path, ["pkg/sub/core.py"]))
    assert set(chosen) == {
        "tests/a/test_direct.py", "tests/a/test_from_package.py", "tests/a/test_from_module.py",
        "tests/a/test_reexport.py", "tests/a/test_via_helper.py", "tests/b/test_via_conftest.py",
        "tests/c/test_core_extra.py",
    }  # fmt: skip
    assert chosen["tests/a/test_direct.py"] == "imports pkg/sub/core.py"
    assert chosen["tests/a/test_via_helper.py"] == (
        "imports pkg/sub/core.py (via tests/a/support_helper.py)"
    )
    assert chosen["tests/c/test_core_extra.py"] == "named test_core*"


def test_without_a_test_of_its_own_the_nearest_importers_tests_are_taken(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/leaf.py": "x = 1\n",
        "pkg/middle.py": "from pkg import leaf\n",
        "pkg/top.py": "import pkg.middle\n",
        "tests/test_top.py": "from pkg.top import *\n",
        "tests/test_else.py": "import json\n",
    })  # fmt: skip
    chosen = _selector().select(tmp_path, ["pkg/leaf.py"])
    assert chosen == [
        (
            "tests/test_top.py",
            "imports pkg/top.py, which imports pkg/middle.py, which imports pkg/leaf.py",
        )
    ]
    assert _selector().select(tmp_path, ["pkg/top.py"]) == [
        ("tests/test_top.py", "imports pkg/top.py; named test_top*")
    ]


def test_nothing_found_is_an_empty_selection(tmp_path: Path) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/alone.py": "", "tests/test_x.py": "import os\n"})
    assert _selector().select(tmp_path, ["pkg/alone.py"]) == []


def test_the_repositorys_own_modules_find_their_tests() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts/mutation_tests.py"), "--why",
         "reference_server/block_manager.py"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = dict(line.split("\t") for line in out.stdout.splitlines())
    # The scheduler's step-by-step tests build their block manager in a helper.
    assert "scheduler_fakes.py" in lines["tests/reference_server/test_step_cost.py"]
    assert "tests/reference_server/test_prefix_cache.py" in lines
