"""The largest embedding batch no longer holds the engine: its inputs run in slices of the step
budget between generation steps, so a completion sent after it finishes first, and /health
answers while it runs (the issue: 128 inputs x 2,047 tokens took 31-36 s of engine time while a
completion and /health waited). Ordering, not timing, is asserted."""

from __future__ import annotations

import threading
import time

import httpx
from server_testlib import metric

# 32 inputs (one batch of the embeddings batcher, so one engine job) of 500 tokens: 16,000
# tokens, 32 slices of a 512-token step budget. Run whole, it held the engine for all of them;
# the completion needs about 5 steps.
INPUTS = [[1 + (i * 7 + j) % 250 for j in range(500)] for i in range(32)]


def _batches(http: httpx.Client) -> float:
    return metric(http.get("/metrics").text, "batchgate_embedding_batch_size_count")


def test_a_completion_and_health_are_served_while_a_large_embedding_runs(server):
    done: dict[str, float] = {}
    results: dict[str, httpx.Response] = {}

    def embed() -> None:
        with httpx.Client(base_url=server.base_url, timeout=600) as http:
            results["embedding"] = http.post("/v1/embeddings", json={"input": INPUTS})
        done["embedding"] = time.monotonic()

    with httpx.Client(base_url=server.base_url, timeout=600) as http:
        changed = http.put("/admin/batching", json={"max_num_batched_tokens": 512})
        assert changed.status_code == 200, changed.text
        try:
            before = _batches(http)
            worker = threading.Thread(target=embed)
            worker.start()
            deadline = time.monotonic() + 60  # the batcher dispatches within milliseconds
            while _batches(http) == before and "embedding" not in done:
                assert time.monotonic() < deadline, "the embedding batch never went out"
                time.sleep(0.005)
            body = {"prompt": "hi", "max_tokens": 4, "ignore_eos": True}
            completion = http.post("/v1/completions", json=body)
            done["completion"] = time.monotonic()
            health = http.get("/health")
            done["health"] = time.monotonic()
            worker.join(600)
        finally:
            http.put("/admin/batching", json=changed.json()["previous"])
    assert completion.status_code == 200 and completion.json()["usage"]["completion_tokens"] == 4
    assert health.status_code == 200
    assert results["embedding"].status_code == 200, results["embedding"].text
    assert len(results["embedding"].json()["data"]) == 32
    assert done["completion"] < done["embedding"] and done["health"] < done["embedding"]
