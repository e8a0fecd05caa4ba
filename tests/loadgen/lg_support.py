"""Helpers for loadgen tests: the fake OpenAI server as a process, loadgen runs, record files.

Derived metrics of records (ITL, TPOT) come from the gate's functions, the one implementation
of each formula (DESIGN: loadgen writes records, the gate derives); TTFT and schedule lag are
plain field differences the tests write out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_openai_server.py")


class FakeServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def control(self, **changes: Any) -> Any:
        req = urllib.request.Request(
            self.url + "/control", data=json.dumps(changes).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict[str, Any]:
        return self.get("/stats")


def start_fake_server(tmp_path: Path, args: list[str]) -> FakeServer:
    port_file = tmp_path / f"fake-port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", "0", "--port-file", str(port_file), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake server exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        if port_file.exists():
            server = FakeServer(proc, int(port_file.read_text()))
            try:
                if server.get("/health")["status"] == "ok":
                    return server
            except OSError:
                pass
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise RuntimeError("fake server did not become healthy within 20 s")


def stop_fake_server(server: FakeServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    server.proc.stderr.close()  # type: ignore[union-attr]


def run_loadgen(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def read_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def read_load(out: Path) -> dict[str, Any]:
    return json.loads((out / "load.json").read_text())


def itl_gaps(records: list[dict[str, Any]]) -> list[float]:
    """Per-token ITL gaps of these records, by the gate's formula."""
    import numpy as np

    from gate.rundir.gaps import itl_gaps as gate_itl_gaps

    times = np.array([t for r in records for t in r["chunk_times"]], dtype=np.float64)
    tokens = np.array([k for r in records for k in r["chunk_tokens"]], dtype=np.int64)
    num_chunks = np.array([len(r["chunk_times"]) for r in records], dtype=np.int64)
    gaps, _ = gate_itl_gaps(times, tokens, num_chunks)
    return [float(g) for g in gaps]


def tpot(rec: dict[str, Any]) -> float | None:
    """TPOT of one record by the gate's formula; None where the gate has none (NaN)."""
    import math

    import numpy as np

    from gate.metrics.client import tpot as gate_tpot

    def col(key: str) -> Any:
        return np.array([np.nan if rec[key] is None else float(rec[key])])

    value = float(
        gate_tpot(
            col("first_token_at"),
            col("done_at"),
            col("output_tokens"),
            np.array([rec["status"] == "ok"]),
        )[0]
    )
    return None if math.isnan(value) else value
