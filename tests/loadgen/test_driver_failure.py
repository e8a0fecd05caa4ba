"""A load driver that raises (a bug) ends the run at once, saying why, instead of leaving it to
wait out its time limit for a summary that never comes: load.json says `crashed` with the
reason, the records made before are kept, and the process exits 5."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def _steady(script: str, url: str, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """`script` run as `python -m loadgen` would be: 3 s of the steady profile at 10 req/s."""
    argv = [sys.executable, "-c", script, "--target", url, "--profile", "steady"]
    return subprocess.run(
        [*argv, "--out", str(out), "--duration", "3", "--rate", "10", *more],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_failing_driver_ends_the_run_now_with_its_reason(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--tokens", "2")
    out = tmp_path / "steady"
    # A 3 s schedule at 10 req/s; the driver raises once it is sent. Before, the run waited
    # out its limit (schedule + request timeout + 30 s) for the missing summary.
    done = _steady(_FAILING, server.url, out)
    assert done.returncode == 5, done.stderr[-3000:]
    assert "loadgen: error: the load driver failed: RuntimeError: boom" in done.stderr
    load = read_load(out)
    assert load["ended"] == "crashed"
    assert (
        "the load driver failed: RuntimeError: boom after the schedule" in load["invalid_reasons"]
    )
    # The records made before the failure are kept (the summary with the sent count is not).
    assert sum(load["counts_by_status"].values()) == len(read_records(out)) > 0


# The worker processes' entry point with worker 1's driver made to fail the same way. The
# master below starts it instead of `python -m loadgen.worker` (its `sys.executable` names this
# file, which drops the `-m loadgen.worker` it is given).
_FAILING_WORKER = """
import sys
import loadgen.worker as worker  # gevent's patching first, as the real worker does
import loadgen.session as session

real_run = session.LoadSession.run

def failing_run(self, t0):
    if self.worker_index != 1:
        return real_run(self, t0)
    self._run_open(t0)
    self.group.join(timeout=5)
    raise RuntimeError("boom in worker 1")

session.LoadSession.run = failing_run
args = sys.argv[1:]
sys.exit(worker.main(args[2:] if args[:2] == ["-m", "loadgen.worker"] else args))
"""

_MASTER = """
import sys
sys.executable = {worker!r}
from loadgen.cli import main
sys.exit(main())
"""


@pytest.mark.slow
def test_a_failing_driver_in_one_of_two_workers_ends_the_run_with_its_reason(
    fake_server, tmp_path
) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--tokens", "2")
    worker = tmp_path / "failing_worker"
    worker.write_text(f"#!{sys.executable}\n{_FAILING_WORKER}", encoding="utf-8")
    worker.chmod(0o755)
    out = tmp_path / "steady"
    # A 3 s schedule at 10 req/s split over two workers; worker 1's driver raises once its
    # share is sent, and its message reaches the master, which ends the run.
    done = _steady(_MASTER.format(worker=str(worker)), server.url, out, "--workers", "2")
    assert done.returncode == 5, done.stderr[-3000:]
    assert "the load driver failed: RuntimeError: boom in worker 1" in done.stderr
    load = read_load(out)
    assert load["ended"] == "crashed" and load["workers"] == 2
    assert "the load driver failed: RuntimeError: boom in worker 1" in load["invalid_reasons"]
    # Both workers' records reached the master's file, each exactly once.
    records = read_records(out)
    assert sum(load["counts_by_status"].values()) == len(records) > 0
    assert {r["worker"] for r in records} == {0, 1}
    assert len({r["id"] for r in records}) == len(records)
