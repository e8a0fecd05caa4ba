"""Live batching changes and step records through /admin against a real server."""

from __future__ import annotations

import asyncio

import httpx
import pytest


def latest_seq(client: httpx.Client) -> int:
    return client.get("/admin/steps", params={"after": 0, "limit": 1}).json()["latest_seq"]


def steps_after(client: httpx.Client, after: int) -> list[dict]:
    records: list[dict] = []
    for _ in range(100):  # bounded paging
        page = client.get("/admin/steps", params={"after": after, "limit": 500}).json()
        if not page["records"]:
            break
        records += page["records"]
        after = page["records"][-1]["seq"]
    return records


async def _concurrent(base_url: str, count: int, max_tokens: int, pad: str = "") -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        responses = await asyncio.gather(
            *(
                http.post(
                    "/v1/completions", json={"prompt": f"p{i}{pad}", "max_tokens": max_tokens}
                )
                for i in range(count)
            )
        )
    return [r.status_code for r in responses]


def test_get_batching_returns_the_live_settings(client):
    settings = client.get("/admin/batching").json()
    assert settings["policy"] == "continuous"
    assert {"max_num_seqs", "max_num_batched_tokens", "interactive", "batch"} <= set(settings)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"policy": "fastest"}, "policy"),
        ({"interactive": {"max_wait_ms": -5}}, "interactive.max_wait_ms"),
        ({"batch": {"bogus": 1}}, "batch.bogus"),
        ({"no_such_setting": 1}, "no_such_setting"),
        ({"slo_target_ms": 0}, "slo_target_ms"),
        ({"slo_min_prefill_tokens": 0}, "slo_min_prefill_tokens"),
        ({"enable_prefix_caching": 1}, "enable_prefix_caching"),
    ],
)
def test_invalid_changes_are_refused_naming_the_field_and_change_nothing(client, change, field):
    before = client.get("/admin/batching").json()
    response = client.put("/admin/batching", json=change)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field
    assert client.get("/admin/batching").json() == before


def test_put_body_must_be_a_non_empty_object(client):
    for content in (b"[1]", b"{}", b"nope"):
        headers = {"content-type": "application/json"}
        response = client.put("/admin/batching", content=content, headers=headers)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "body"


def test_a_valid_change_returns_previous_and_current_and_rolls_back(client):
    before = client.get("/admin/batching").json()
    response = client.put("/admin/batching", json={"interactive": {"max_wait_ms": 7.5}})
    assert response.status_code == 200
    body = response.json()
    assert body["previous"] == before
    assert body["current"]["interactive"]["max_wait_ms"] == 7.5
    assert body["current"]["interactive"]["max_waiting"] == before["interactive"]["max_waiting"]
    rollback = client.put("/admin/batching", json=body["previous"])
    assert rollback.status_code == 200
    assert client.get("/admin/batching").json() == before


def test_max_num_seqs_1_serializes_requests_and_restoring_it_batches_again(server, client):
    change = client.put("/admin/batching", json={"max_num_seqs": 1, "max_num_batched_tokens": 64})
    assert change.status_code == 200
    try:
        start = latest_seq(client)
        assert asyncio.run(_concurrent(server.base_url, 3, 10)) == [200] * 3
        serialized = steps_after(client, start)
    finally:
        assert client.put("/admin/batching", json=change.json()["previous"]).status_code == 200
    assert serialized and max(r["num_seqs"] for r in serialized) == 1
    # Each request ran alone: about 3 x 10 steps, never two at once.
    assert sum(r["num_decode_tokens"] + (r["num_prefill_tokens"] > 0) for r in serialized) >= 30
    start = latest_seq(client)
    assert asyncio.run(_concurrent(server.base_url, 3, 30)) == [200] * 3
    batched = steps_after(client, start)
    assert max(r["num_seqs"] for r in batched) >= 2


def test_slo_policy_is_switched_live_and_shows_its_plan(server, client):
    """policy slo through PUT /admin/batching: every step after has a token budget within the
    prefill floor plus the decodes, once its model is ready a prediction, and /metrics the
    slo gauges; switching back to continuous takes them away."""
    change = client.put(
        "/admin/batching",
        json={"policy": "slo", "slo_target_ms": 0.2, "slo_min_prefill_tokens": 8},
    )
    assert change.status_code == 200
    assert change.json()["current"]["slo_target_ms"] == 0.2
    try:
        start = latest_seq(client)
        # 40-byte prompts: five floor-sized prefill steps each, so the cost model gets ready.
        assert asyncio.run(_concurrent(server.base_url, 6, 24, pad=" lorem ipsum" * 3)) == [200] * 6
        records = steps_after(client, start)
        metrics = client.get("/metrics").text
    finally:
        assert client.put("/admin/batching", json=change.json()["previous"]).status_code == 200
    assert records and all(r["policy"] == "slo" for r in records)
    # A target no step meets: each step computes its decodes plus at most the 8-token floor.
    assert all(r["num_prefill_tokens"] <= 8 for r in records)
    assert all(r["token_budget"] is not None for r in records)
    assert any(r["predicted_seconds"] is not None for r in records)
    assert "batchgate_slo_token_budget " in metrics
    assert "batchgate_slo_prediction_error_seconds " in metrics
    assert asyncio.run(_concurrent(server.base_url, 1, 4)) == [200]
    assert "batchgate_slo_token_budget " not in client.get("/metrics").text


def test_steps_pages_by_sequence_number_and_reports_missed_records(client):
    # The open server keeps 64 records; make sure more than that have happened.
    client.post("/v1/completions", json={"prompt": "fill", "max_tokens": 80})
    page = client.get("/admin/steps", params={"after": 0, "limit": 5}).json()
    assert page["latest_seq"] >= 80
    assert page["oldest_seq"] == page["latest_seq"] - 63
    assert page["missed"] == page["oldest_seq"] - 1
    seqs = [r["seq"] for r in page["records"]]
    assert seqs == list(range(page["oldest_seq"], page["oldest_seq"] + 5))
    record = page["records"][0]
    expected_keys = {
        "duration_seconds", "forward_seconds", "policy", "num_seqs", "num_prefill_tokens",
        "num_decode_tokens", "num_kv_blocks_used", "num_kv_blocks_total", "num_preemptions",
        "num_recomputed_tokens", "num_waiting", "num_running",
    }  # fmt: skip
    assert expected_keys <= set(record)
    tail = client.get("/admin/steps", params={"after": seqs[-1]}).json()
    assert tail["missed"] == 0
    assert tail["records"][0]["seq"] == seqs[-1] + 1
    # Caught up: nothing was overwritten since the last poll, so nothing is reported missed, and
    # any record returned (none unless a step ran in between) is one of the next ones, in order.
    caught_up = client.get("/admin/steps", params={"after": tail["latest_seq"]}).json()
    assert caught_up["missed"] == 0
    assert caught_up["latest_seq"] >= tail["latest_seq"]
    newer = [r["seq"] for r in caught_up["records"]]
    assert newer == list(range(tail["latest_seq"] + 1, tail["latest_seq"] + 1 + len(newer)))


@pytest.mark.parametrize(
    ("params", "field"), [({"after": "x"}, "after"), ({"after": -1}, "after"),
                          ({"limit": 0}, "limit"), ({"limit": 10**6}, "limit")]
)  # fmt: skip
def test_bad_steps_query_is_400_naming_it(client, params, field):
    response = client.get("/admin/steps", params=params)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field
