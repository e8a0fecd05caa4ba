"""Disconnect storms free every KV block; /metrics parses and reflects served requests."""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_testlib import metric, wait_until


async def _cut_stream(http: httpx.AsyncClient, rng: random.Random, index: int) -> str:
    body = {"prompt": f"storm {index}", "max_tokens": 200, "stream": True,
            "priority": rng.choice(["interactive", "batch"])}  # fmt: skip
    if index % 2:
        body = {"messages": [{"role": "user", "content": f"storm {index}"}], **body}
        del body["prompt"]
        path = "/v1/chat/completions"
    else:
        path = "/v1/completions"
    cut_after = rng.randint(0, 25)  # 0: hang up before any chunk arrives
    async with http.stream("POST", path, json=body) as response:
        seen = 0
        async for _line in response.aiter_lines():
            if seen >= cut_after:
                break
            seen += 1
    return "cut"


async def _storm(base_url: str, count: int) -> None:
    rng = random.Random(7)
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(base_url=base_url, timeout=60, limits=limits) as http:
        await asyncio.gather(*(_cut_stream(http, rng, i) for i in range(count)))


def test_a_disconnect_storm_leaves_no_kv_blocks_in_use(server, client):
    before = client.get("/metrics").text
    aborted_before = metric(before, "batchgate_requests_aborted_total")
    asyncio.run(_storm(server.base_url, 40))

    def idle() -> bool:
        text = client.get("/metrics").text
        running = sum(
            metric(text, "batchgate_num_requests_running", priority=p)
            + metric(text, "batchgate_num_requests_waiting", priority=p)
            for p in ("interactive", "batch")
        )
        return metric(text, "batchgate_kv_blocks_used") == 0 and running == 0

    assert wait_until(idle, timeout_seconds=20), client.get("/metrics").text[-3000:]
    after = client.get("/metrics").text
    assert metric(after, "batchgate_requests_aborted_total") - aborted_before >= 30
    assert metric(after, "batchgate_kv_usage_peak_ratio") > 0
    # The server is still healthy and serving.
    assert client.post("/v1/completions", json={"prompt": "ok", "max_tokens": 3}).status_code == 200


def test_metrics_parse_and_count_served_requests(client):
    def counts() -> tuple[float, float, float]:
        text = client.get("/metrics").text
        return (
            metric(text, "batchgate_ttft_seconds_count", priority="batch"),
            metric(text, "batchgate_e2e_seconds_count", priority="batch"),
            metric(text, "batchgate_generation_tokens_total"),
        )

    ttft0, e2e0, tokens0 = counts()
    response = client.post("/v1/completions", json={"prompt": "m", "max_tokens": 5,
                                                    "priority": "batch"})  # fmt: skip
    assert response.status_code == 200
    ttft1, e2e1, tokens1 = counts()
    assert (ttft1 - ttft0, e2e1 - e2e0) == (1, 1)
    assert tokens1 - tokens0 >= 5
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f.type for f in text_string_to_metric_families(response.text)}
    assert families["batchgate_step_duration_seconds"] == "histogram"
    assert families["process_resident_memory_bytes"] == "gauge"
    assert metric(response.text, "process_resident_memory_bytes") > 0
    assert metric(response.text, "batchgate_kv_blocks_capacity") > 0
    info = [f for f in text_string_to_metric_families(response.text) if f.name == "batchgate_info"]
    labels = info[0].samples[0].labels
    assert labels["model"] == "tiny" and labels["policy"] == "continuous"
    assert labels["device"] == "cpu"


def test_rejections_by_the_http_layer_are_counted(client):
    def invalid() -> float:
        text = client.get("/metrics").text
        try:
            return metric(text, "batchgate_requests_rejected_total", reason="invalid_request")
        except AssertionError:
            return 0.0

    before = invalid()
    client.post("/v1/completions", json={"prompt": "x", "n": 4})
    assert invalid() == before + 1


def test_embedding_metrics_record_batches(client):
    text = client.get("/metrics").text
    requests_before = metric(text, "batchgate_embedding_requests_total")
    assert client.post("/v1/embeddings", json={"input": ["a", "b"]}).status_code == 200
    text = client.get("/metrics").text
    assert metric(text, "batchgate_embedding_requests_total") == requests_before + 1
    assert metric(text, "batchgate_embedding_batch_size_count") >= 1
    assert metric(text, "batchgate_embedding_latency_seconds_count") >= 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not on PATH")
def test_live_metrics_pass_promtool(client):
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=client.get("/metrics").content,
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
