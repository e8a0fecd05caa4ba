"""`batchgate serve` and `batchgate load` hand every flag to their program, `--help` included,
through the installed console script exactly as the README shows it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BATCHGATE = Path(sys.executable).parent / "batchgate"


@pytest.mark.parametrize(
    ("verb", "usage"),
    [("serve", "usage: batchgate serve"), ("load", "usage: batchgate load")],
)
def test_help_is_the_program_s_own(tmp_path, verb, usage):
    done = subprocess.run(
        [str(BATCHGATE), verb, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert usage in done.stdout


def test_flags_reach_the_server_and_its_errors_are_its_own(tmp_path):
    done = subprocess.run(
        [str(BATCHGATE), "serve", "--port", "0", "--no-such-flag"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr
    assert "unrecognized arguments: --port" not in done.stderr  # the server took --port
