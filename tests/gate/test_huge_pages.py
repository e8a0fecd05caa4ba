"""gate/runtime/huge_pages.py: `batchgate` turns numpy's huge-page madvise off for its own
process, unless NUMPY_MADVISE_HUGEPAGE chose; checked in child processes (the switch is
process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = (
    "import numpy as np\n"
    "try:\n"
    "    from numpy._core.multiarray import _get_madvise_hugepage\n"
    "except ImportError:\n"
    "    from numpy.core.multiarray import _get_madvise_hugepage\n"
    "before = _get_madvise_hugepage()\n"
    "{call}\n"
    "print(before, _get_madvise_hugepage())\n"
)


def _run(call: str, env_value: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if env_value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(call=call)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return out.stdout.split()


def test_the_command_turns_numpys_huge_page_madvise_off() -> None:
    before, _ = _run("", None)
    if before != "True":
        pytest.skip("numpy does not madvise huge pages on this kernel")
    off = "from gate.runtime.huge_pages import prefer_small_pages; assert prefer_small_pages()"
    assert _run(off, None) == ["True", "False"]
    # The command itself does it before parsing: `batchgate --help` exits through argparse.
    cli = "from gate.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _run(cli, None)[-1] == "False"


def test_the_environment_keeps_its_own_choice() -> None:
    keep = "from gate.runtime.huge_pages import prefer_small_pages; assert not prefer_small_pages()"
    before, after = _run(keep, "1")
    assert before == after
