"""server_probe.py, the /health and /metrics prober of bench_server.py, driven as the benchmark
drives it (launch, start, stop) against a small local HTTP server on port 0: it warms up before
`ready`, records only from `go` until its stdin closes, and a probe that cannot start or fails
says so. Nothing here asserts a speed."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

# Started by path as bench_server starts it: it imports nothing from the benchmarks package.
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


class _Target(http.server.ThreadingHTTPServer):
    def __init__(self, health_status: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.health_status = health_status
        self.hits: Counter[str] = Counter()
        self.metrics_bytes = 3  # a real exposition is tens of KiB: more than one read
        self.close_after_health = False  # answer /health with Connection: close
        self.content_length = True
        self.idle_timeout: float | None = None  # close a connection idle this long, unannounced


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the reference server

    def setup(self) -> None:
        # The stdlib closes a connection whose next request does not come within `timeout`.
        self.timeout = self.server.idle_timeout  # type: ignore[attr-defined]
        super().setup()

    def do_GET(self) -> None:  # the stdlib handler's name for GET
        server: _Target = self.server  # type: ignore[assignment]
        server.hits[self.path] += 1
        status = server.health_status if self.path == "/health" else 200
        body = b"ok\n" if self.path == "/health" else b"m" * (server.metrics_bytes - 1) + b"\n"
        self.send_response(status)
        if server.content_length:
            self.send_header("Content-Length", str(len(body)))
        if server.close_after_health and self.path == "/health":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def target(request) -> Iterator[tuple[_Target, str]]:
    server = _Target(getattr(request, "param", 200))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _wait_for_hits(server: _Target, path: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while server.hits[path] < count:
        assert time.monotonic() < deadline, f"{path}: {server.hits[path]} of {count} probes"
        time.sleep(0.01)


def _record(server: _Target, url: str, interval: float, *, metrics_hits: int) -> dict:
    """Launch the probe, record until the target has seen `metrics_hits` /metrics probes (the
    warm-up's included), stop it; its latencies."""
    from benchmarks import server_probe

    process = server_probe.launch(url, interval)
    try:
        server_probe.start(process)
        _wait_for_hits(server, "/metrics", metrics_hits)
    finally:
        latencies = server_probe.stop(process)
    return latencies


def test_it_records_only_between_go_and_the_end_of_its_input(target) -> None:
    from benchmarks import server_probe

    server, url = target
    process = server_probe.launch(url, 0.05)  # returns once the probe printed `ready`
    try:
        assert server.hits == {"/health": 1, "/metrics": 1}  # the warm-up pair
        time.sleep(0.3)  # six intervals: nothing is probed before `go`
        assert server.hits == {"/health": 1, "/metrics": 1}
        server_probe.start(process)
        _wait_for_hits(server, "/metrics", 4)  # three recorded pairs at least
    finally:
        latencies = server_probe.stop(process)
    assert set(latencies) == {"/health", "/metrics"}
    assert len(latencies["/health"]) == len(latencies["/metrics"]) >= 3
    assert server.hits["/health"] == 1 + len(latencies["/health"])  # the warm-up is not recorded
    assert all(0 < value < 30 for values in latencies.values() for value in values)


def test_input_that_ends_before_go_gives_no_latencies(target) -> None:
    server, url = target
    process = subprocess.run(
        [sys.executable, str(BENCHMARKS / "server_probe.py"), url],
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr
    ready, result = process.stdout.strip().splitlines()
    assert ready == "ready"
    assert json.loads(result) == {"/health": [], "/metrics": []}
    assert server.hits == {"/health": 1, "/metrics": 1}


@pytest.mark.parametrize("target", [503], indirect=True)
def test_a_probe_that_cannot_start_is_an_error(target) -> None:
    from benchmarks import server_probe

    _, url = target
    with pytest.raises(SystemExit, match="probe did not start"):
        server_probe.launch(url, 0.05)


def test_a_probe_that_fails_during_the_run_fails_the_benchmark(target) -> None:
    from benchmarks import server_probe

    server, url = target
    process = server_probe.launch(url, 0.05)
    server.health_status = 503  # the server stops answering after the warm-up
    server_probe.start(process)
    _wait_for_hits(server, "/health", 2)
    process.wait(timeout=30)  # it stops at its first failed probe
    with pytest.raises(SystemExit, match="probe failed"):
        server_probe.stop(process)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["http://127.0.0.1:1"], "server_probe: "),  # a closed port: nothing listens
        (["http://[::1"], "server_probe: "),  # not a URL
        (["http://127.0.0.1:1", "--interval", "0"], "--interval must be > 0"),
    ],
)
def test_bad_input_is_a_message_and_a_non_zero_exit(args, said) -> None:
    process = subprocess.run(
        [sys.executable, str(BENCHMARKS / "server_probe.py"), *args],
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode != 0
    assert said in process.stderr
    assert "Traceback" not in process.stderr


def test_long_answers_are_read_whole_and_a_closed_connection_is_opened_again(target) -> None:
    server, url = target
    server.metrics_bytes = 300_000
    server.close_after_health = True
    latencies = _record(server, url, 0.02, metrics_hits=4)
    assert len(latencies["/health"]) == len(latencies["/metrics"]) >= 3


def test_an_answer_without_a_content_length_fails_the_probe(target) -> None:
    server, url = target
    server.content_length = False
    process = subprocess.run(
        [sys.executable, str(BENCHMARKS / "server_probe.py"), url],
        input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode == 1
    assert "without a Content-Length" in process.stderr
    assert "Traceback" not in process.stderr


def test_a_connection_the_server_closed_while_idle_is_opened_again(target) -> None:
    server, url = target
    server.idle_timeout = 0.2  # closed between two probes, without a Connection: close
    latencies = _record(server, url, 0.5, metrics_hits=3)
    assert len(latencies["/health"]) >= 2
