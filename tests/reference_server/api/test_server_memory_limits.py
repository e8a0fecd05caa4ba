"""Extreme but valid settings are refused when they cannot fit the memory available, live and at
start-up, with the reason; the server's settings stay as they were."""

from __future__ import annotations

import subprocess
import sys

import httpx
from conftest import REPO_ROOT


def test_a_live_token_budget_that_cannot_fit_is_a_400_naming_the_setting(server):
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        before = http.get("/admin/batching").json()
        response = http.put("/admin/batching", json={"max_num_batched_tokens": 10**9})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "max_num_batched_tokens" and "MiB" in error["message"]
        assert http.get("/admin/batching").json() == before


def test_a_start_up_token_budget_that_cannot_fit_names_the_flag_and_exits_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "reference_server", "--port", "0", "--device", "cpu",
         "--max-num-batched-tokens", str(10**9), "--max-prefill-chunk-tokens", str(10**9)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--max-num-batched-tokens" in result.stderr and "Traceback" not in result.stderr
