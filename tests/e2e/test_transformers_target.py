"""`batchgate run --target URL` against Hugging Face `transformers serve --continuous-batching`
(paged attention), a second real engine, from an empty directory with the packaged default
suite: the kind is named `transformers`, its streams (which end after the finish_reason and
usage chunks, without `data: [DONE]`) are complete answers, the request fields its strict
schema refuses are found and left out (no HTTP 422 in any profile), the calibration sweep
saturates it, and every gate it cannot measure (no /metrics, no Batch API) is listed with the
reason.

The target is a tiny random Llama built locally by scripts/transformers_target.py (no hub).
Skipped, with the reason, when the `transformers` extra is not installed
(`pip install -e ".[transformers]"`; ./scripts/bootstrap installs it).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from e2e_support import REPO, batchgate_argv, read_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = REPO / "scripts" / "transformers_target.py"
NEEDS = ("transformers", "accelerate", "fastapi", "uvicorn")
MISSING = [name for name in NEEDS if importlib.util.find_spec(name) is None]
# Its /v1/models answer comes first, then warm-up of the paged KV pool: ~50 s on 2 busy cores.
START_TIMEOUT_SECONDS = 240.0
RUN_TIMEOUT_SECONDS = 600.0

# Server-side gates of the packaged default that need /metrics, which transformers serve lacks,
# and the offline job's, which need /v1/batches (404 there).
NO_METRICS = {"kv_leak_after_drain", "burst_recompute_ratio", "prefix_cache_hit_ratio"}
NO_BATCH_API = {"offline_job_completed", "offline_job_throughput", "chat_during_offline_job"}


@pytest.fixture(scope="module")
def transformers_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if MISSING:
        pytest.skip(f"the transformers extra is not installed (missing: {', '.join(MISSING)})")
    root = tmp_path_factory.mktemp("transformers-target")
    model = root / "model"
    subprocess.run([sys.executable, str(SCRIPT), "build", str(model)], check=True, timeout=120)
    port_file = root / "port"
    log = (root / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "serve", str(model), "--port", "0",
         "--port-file", str(port_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        url = None
        while url is None:
            assert proc.poll() is None, (root / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "transformers serve did not answer /health"
            time.sleep(1.0)
            if port_file.exists() and port_file.read_text().strip():
                candidate = f"http://127.0.0.1:{port_file.read_text().strip()}"
                try:
                    if httpx.get(candidate + "/health", timeout=2.0).status_code == 200:
                        url = candidate
                except httpx.HTTPError:
                    pass
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def test_the_default_suite_runs_against_transformers_serve(tmp_path, transformers_target):
    workdir = tmp_path / "empty"
    workdir.mkdir()
    started = time.monotonic()
    done = subprocess.run(
        batchgate_argv(
            "run", "--target", transformers_target, "--scale", "smoke",
            "--out", str(tmp_path / "runs"), "--run-id", "tfm",
        ),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    run_dir = tmp_path / "runs" / "tfm"
    print(f"transformers serve: exit {done.returncode} in {took:.0f} s")
    print(done.stdout[-9000:])
    # A run that measured: passed, failed, inconclusive or no data for some gate; never a
    # usage error, an invalid gates file or a crash.
    assert done.returncode in (0, 1, 3, 5), out[-4000:]
    assert "target kind transformers (no /metrics" in out, out[-3000:]
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["target"]["server_kind"] == "transformers"
    assert manifest["target"]["has_metrics"] is False
    calibration = read_json(run_dir / "calibration.json")
    assert all(p["measurement_valid"] for p in calibration["client"].values()), calibration
    sweep = calibration["capacity_sweep"]
    assert sweep["saturated"] is True, sweep["detail"]
    assert calibration["capacity"]["short"]["output_tokens_per_second"] > 0
    left_out = manifest["gates_not_measurable"]
    for gate in NO_METRICS:
        assert "serves no /metrics" in left_out[gate], left_out
    for gate in NO_BATCH_API:
        assert "no Batch API" in left_out[gate], left_out
    # Its streams end without [DONE] after finish_reason and usage: complete answers, never a
    # protocol error; and most of the answers of a plain profile are ok.
    for requests in run_dir.glob("*/requests.jsonl"):
        statuses = [json.loads(line)["status"] for line in requests.read_text().splitlines()]
        assert "protocol_error" not in statuses, requests
    # Its strict schema refuses our extension fields (422): the start-of-run check finds them,
    # the load leaves them out, and no request of any profile (calibration included) is refused.
    refused = set(manifest["target"]["refused_fields"])
    print(f"refused fields: {sorted(refused)} ({manifest['target']['fields_check']})")
    assert {"min_tokens", "ignore_eos", "top_k", "thinking_tokens"} <= refused, manifest["target"]
    assert "the target refuses the request fields" in out
    for requests in run_dir.rglob("requests.jsonl"):
        http = [json.loads(line)["http_status"] for line in requests.read_text().splitlines()]
        assert 422 not in http, requests
    for load_path in run_dir.rglob("load.json"):
        assert set(read_json(load_path)["dropped_fields"]) == refused, load_path
    lines = (run_dir / "night_trickle" / "requests.jsonl").read_text().splitlines()
    plain = [r for r in map(json.loads, lines) if r.get("probe") is None]  # probes: issue 39
    load = read_json(run_dir / "night_trickle" / "load.json")
    assert load["streams_ended_without_done"] >= len(plain) > 0, load
    assert plain and all(r["status"] == "ok" for r in plain), [r["error"] for r in plain][:3]
    verdicts = {v["id"]: v for v in read_json(run_dir / "verdicts.json")["verdicts"]}
    assert verdicts["trickle_ttft@night_trickle"]["status"] in ("pass", "fail", "inconclusive")
    assert not any(v.split("@")[0] in NO_METRICS | NO_BATCH_API for v in verdicts)
