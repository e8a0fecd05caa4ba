"""A load driver that raises (a bug) ends the run at once, saying why, instead of leaving it to
wait out its time limit for a summary that never comes: load.json says `crashed` with the
reason, the records made before are kept, and the process exits 5."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lg_support import REPO, read_load, read_records

# The same entry point as `python -m loadgen`, with the driver made to fail after a few
# requests (the session's own code is what would raise in real life).
_FAILING = """
import sys
import loadgen.session as session
from loadgen.cli import main

def failing_run(self, t0):
    self._run_open(t0)
    self.group.join(timeout=5)
    raise RuntimeError("boom after the schedule")
session.LoadSession.run = failing_run
sys.exit(main())
"""


@pytest.mark.slow
def test_a_failing_driver_ends_the_run_now_with_its_reason(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--tokens", "2")
    out = tmp_path / "steady"
    argv = [sys.executable, "-c", _FAILING, "--target", server.url, "--profile", "steady"]
    # A 3 s schedule at 10 req/s; the driver raises once it is sent. Before, the run waited
    # out its limit (schedule + request timeout + 30 s) for the missing summary.
    done = subprocess.run(
        [*argv, "--out", str(out), "--duration", "3", "--rate", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 5, done.stderr[-3000:]
    assert "loadgen: error: the load driver failed: RuntimeError: boom" in done.stderr
    load = read_load(out)
    assert load["ended"] == "crashed"
    assert (
        "the load driver failed: RuntimeError: boom after the schedule" in load["invalid_reasons"]
    )
    # The records made before the failure are kept (the summary with the sent count is not).
    assert sum(load["counts_by_status"].values()) == len(read_records(out)) > 0
