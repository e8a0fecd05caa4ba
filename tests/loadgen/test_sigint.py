"""The load generator stops politely on SIGINT even when it inherited SIGINT as ignored (a
parent started as a background job of a non-interactive shell): batchgate's abort and Ctrl-C
paths rely on it to keep every record and write load.json (its runner installs its own
handler, so an inherited "ignore" does not stick)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from lg_support import REPO, read_load, read_records

from loadgen.records import validate_load_json


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
def test_sigint_stops_the_load_even_when_inherited_as_ignored(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1", "--tokens", "2")
    out = tmp_path / "steady"
    argv = [sys.executable, "-m", "loadgen", "--target", server.url, "--profile", "steady"]
    # Probes pending (spread over the minute) and requests in flight: the stop cancels both.
    proc = subprocess.Popen(
        [*argv, "--out", str(out), "--duration", "60", "--rate", "20", "--set", "probes=4"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint,
    )
    deadline = time.monotonic() + 60
    while server.stats()["requests_total"] < 5 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGINT was ignored: the load ran on") from None
    assert proc.returncode == 5, stderr
    # A cancelled greenlet ends quietly: no gevent traceback buries the reason in load.log.
    assert "RequestCancelled" not in stderr and "Traceback" not in stderr, stderr
    load = read_load(out)
    assert load["ended"] == "interrupted" and validate_load_json(load) == []
    assert len(read_records(out)) == load["sent_requests"] >= 5
