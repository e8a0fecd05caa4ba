"""The OpenAI Batch API through the official `openai` client: jobs on every endpoint, pages,
cancel, per-line errors with line numbers, each limit refused naming its flag, expiry, the
in-flight bound, interactive requests served in their own class during a job, retention.

Two real servers on port 0 with data directories, launched together, private to this module:
"limits" (small limits, a 4-line in-flight bound) and "retention" (files kept 2 s).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from batch_testlib import (
    BatchServer,
    completion_lines,
    launch,
    line,
    results,
    upload,
    wait_batch,
)
from server_testlib import metric, wait_until

INFLIGHT = 4
LIMIT_ARGS = [
    "--batch-max-inflight", str(INFLIGHT), "--batch-max-file-lines", "400",
    "--batch-max-file-bytes", "200000", "--batch-max-line-bytes", "2000",
    "--batch-max-requests-per-job", "300", "--batch-max-completion-window-seconds", "7200",
]  # fmt: skip


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, BatchServer]]:
    base = tmp_path_factory.mktemp("batch-servers")
    launched = {
        "limits": launch(base / "limits", LIMIT_ARGS),
        "retention": launch(base / "retention", ["--batch-retention-seconds", "2"]),
    }
    yield launched
    for server in launched.values():
        assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def server(servers: dict[str, BatchServer]) -> BatchServer:
    return servers["limits"].wait_ready()


@pytest.fixture(scope="module")
def client(server: BatchServer):
    with server.client() as openai_client:
        yield openai_client


@pytest.fixture
def http(server: BatchServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=60) as plain:
        yield plain


def _ids(rows: list[dict]) -> list[str]:
    return [row["custom_id"] for row in rows]


ENDPOINT_BODIES = {
    "/v1/completions": lambda i: {"prompt": f"p{i}", "max_tokens": 4, "seed": i,
                                  "ignore_eos": True},
    "/v1/chat/completions": lambda i: {"messages": [{"role": "user", "content": f"hi {i}"}],
                                       "max_tokens": 4, "seed": i, "ignore_eos": True},
    "/v1/embeddings": lambda i: {"input": [f"text {i}", "more"]},
}  # fmt: skip


@pytest.mark.parametrize("endpoint", list(ENDPOINT_BODIES))
def test_openai_client_runs_a_job_and_reads_its_output_keyed_by_custom_id(client, endpoint):
    body = ENDPOINT_BODIES[endpoint]
    lines = [line(f"{endpoint}-{i}", body(i), url=endpoint) for i in range(6)]
    uploaded = upload(client, lines)
    assert (uploaded.object, uploaded.purpose, uploaded.status) == ("file", "batch", "processed")
    assert client.files.retrieve(uploaded.id).bytes == uploaded.bytes
    created = client.batches.create(
        input_file_id=uploaded.id, endpoint=endpoint, completion_window="1h",
        metadata={"suite": "batch"},
    )  # fmt: skip
    assert created.status == "validating" and created.metadata == {"suite": "batch"}
    batch = wait_batch(client, created.id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed) == (6, 6)
    assert batch.request_counts.failed == 0 and batch.error_file_id is None
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    assert batch.expires_at == batch.created_at + 3600
    output, errors = results(client, batch)
    assert errors == []
    assert _ids(output) == [f"{endpoint}-{i}" for i in range(6)]
    for row in output:
        assert row["error"] is None and row["id"].startswith("batch_req_")
        assert row["response"]["status_code"] == 200 and row["response"]["request_id"]
    first = output[0]["response"]["body"]
    if endpoint == "/v1/embeddings":
        assert first["object"] == "list" and len(first["data"]) == 2
    else:
        assert first["usage"]["completion_tokens"] == 4
        assert batch.usage.output_tokens == 6 * 4
    assert client.files.retrieve(batch.output_file_id).purpose == "batch_output"


def test_batches_list_pages_newest_first_and_the_client_follows_the_cursor(client):
    uploaded = upload(client, completion_lines(1, max_tokens=1))
    created = [
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="1h"
        ).id
        for _ in range(3)
    ]
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == created[::-1][:2]
    assert page.has_more is True
    listed = [b.id for b in client.batches.list(limit=2)]  # auto-pagination via `after`
    assert listed[:3] == created[::-1]
    assert len(listed) == len(set(listed))
    with pytest.raises(openai.BadRequestError):
        client.batches.list(limit=101)
    files = client.files.list(purpose="batch", limit=1, order="desc")
    assert files.data[0].id == uploaded.id


def test_cancel_aborts_the_job_and_reports_every_unrun_line_once(client):
    lines = completion_lines(200, max_tokens=48, prefix="c")
    uploaded = upload(client, lines)
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="1h"
    )
    wait_batch(client, batch.id, until=lambda b: b.request_counts.completed >= 1)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    assert cancelling.cancelling_at is not None
    batch = wait_batch(client, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    counts = batch.request_counts
    assert counts.total == 200 and counts.completed + counts.failed == 200
    assert counts.completed < 200
    output, errors = results(client, batch)
    assert sorted(_ids(output) + _ids(errors)) == sorted(f"c{i}" for i in range(200))
    assert {row["error"]["code"] for row in errors} == {"batch_cancelled"}
    assert client.batches.cancel(batch.id).status == "cancelled"  # idempotent
    with pytest.raises(openai.NotFoundError):
        client.batches.cancel("batch_missing")


def test_cancelling_a_completed_job_is_refused(client):
    batch = client.batches.create(
        input_file_id=upload(client, completion_lines(1, max_tokens=1)).id,
        endpoint="/v1/completions", completion_window="1h",
    )  # fmt: skip
    assert wait_batch(client, batch.id).status == "completed"
    with pytest.raises(openai.ConflictError) as caught:
        client.batches.cancel(batch.id)
    assert caught.value.body["code"] == "batch_not_cancellable"


def test_bad_lines_go_to_the_error_file_with_their_line_numbers_and_the_rest_runs(client):
    good = {"prompt": "ok", "max_tokens": 2}
    lines = [
        line("a", good),                                     # 1 runs
        "{not json",                                         # 2 invalid_json
        line("b", good, url="/v1/images/generations"),       # 3 unknown_endpoint
        line("a", good),                                     # 4 duplicate_custom_id
        line("c", {"prompt": "x" * 2100, "max_tokens": 2}),  # 5 line_too_large
        json.dumps({"method": "POST", "url": "/v1/completions", "body": good}),  # 6 no custom_id
        line("d", {"prompt": "ok", "max_tokens": 0}),        # 7 refused by the server: 400
        "",                                                  # 8 blank: skipped
        line("e", good, url="/v1/embeddings"),               # 9 mismatched_endpoint
        line("f", good),                                     # 10 runs
    ]  # fmt: skip
    batch = client.batches.create(
        input_file_id=upload(client, lines).id, endpoint="/v1/completions",
        completion_window="1h",
    )  # fmt: skip
    batch = wait_batch(client, batch.id)
    assert batch.status == "completed"
    assert batch.request_counts.total == 9
    assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 7)
    output, errors = results(client, batch)
    assert _ids(output) == ["a", "f"]
    got = {row["error"]["line"]: row["error"]["code"] for row in errors}
    assert got == {2: "invalid_json", 3: "unknown_endpoint", 4: "duplicate_custom_id",
                   5: "line_too_large", 6: "missing_custom_id", 7: "invalid_value",
                   9: "mismatched_endpoint"}  # fmt: skip
    by_line = {row["error"]["line"]: row for row in errors}
    assert "--batch-max-line-bytes" in by_line[5]["error"]["message"]
    refused = by_line[7]["response"]
    assert refused["status_code"] == 400 and refused["body"]["error"]["param"] == "max_tokens"
    assert by_line[4]["custom_id"] == "a" and by_line[2]["custom_id"] is None


def _refusal(call) -> tuple[int, dict]:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value.status_code, caught.value.body


def test_each_limit_is_refused_with_an_error_naming_its_flag(client, http):
    status, body = _refusal(lambda: upload(client, ["x" * 1000] * 250))
    assert (status, body["code"], body["param"]) == (413, "file_too_large", "file")
    assert "--batch-max-file-bytes" in body["message"]
    status, body = _refusal(lambda: upload(client, ["{}"] * 401))
    assert (status, body["code"]) == (400, "too_many_lines")
    assert "--batch-max-file-lines" in body["message"]
    too_many = upload(client, completion_lines(301, max_tokens=1))
    status, body = _refusal(lambda: client.batches.create(
        input_file_id=too_many.id, endpoint="/v1/completions", completion_window="1h"
    ))  # fmt: skip
    assert (status, body["code"], body["param"]) == (400, "too_many_requests", "input_file_id")
    assert "--batch-max-requests-per-job" in body["message"]
    small = upload(client, completion_lines(1, max_tokens=1))
    status, body = _refusal(lambda: client.batches.create(
        input_file_id=small.id, endpoint="/v1/completions", completion_window="24h"
    ))  # fmt: skip
    assert (status, body["code"]) == (400, "completion_window_too_long")
    assert "--batch-max-completion-window-seconds" in body["message"]
    for window in ("1d", "0h", "soon"):
        status, body = _refusal(lambda w=window: client.batches.create(
            input_file_id=small.id, endpoint="/v1/completions", completion_window=w
        ))  # fmt: skip
        assert (status, body["param"]) == (400, "completion_window")
    status, body = _refusal(lambda: client.batches.create(
        input_file_id=small.id, endpoint="/v1/moderations", completion_window="1h"
    ))  # fmt: skip
    assert (status, body["param"]) == (400, "endpoint")
    status, body = _refusal(lambda: client.batches.create(
        input_file_id="file-nope", endpoint="/v1/completions", completion_window="1h"
    ))  # fmt: skip
    assert (status, body["code"]) == (404, "file_not_found")
    response = http.post("/v1/files", data={"purpose": "fine-tune"},
                         files={"file": ("x.jsonl", io.BytesIO(b"{}\n"))})  # fmt: skip
    assert response.status_code == 400 and response.json()["error"]["param"] == "purpose"


def test_a_job_past_its_window_expires_keeping_finished_lines(client):
    # 300 lines (the job cap here) x 200 tokens, a few at a time: tens of thousands of steps, far
    # past a 2 s window on any machine (40 lines could finish in time on a fast one).
    n = 300
    lines = completion_lines(n, max_tokens=200, prefix="x")
    batch = client.batches.create(
        input_file_id=upload(client, lines).id, endpoint="/v1/completions",
        completion_window="2s",
    )  # fmt: skip
    batch = wait_batch(client, batch.id, timeout_seconds=120)
    assert batch.status == "expired" and batch.expired_at is not None
    assert batch.expires_at - batch.created_at == 2
    counts = batch.request_counts
    assert counts.total == n and counts.completed + counts.failed == n
    output, errors = results(client, batch)
    assert sorted(_ids(output) + _ids(errors)) == sorted(f"x{i}" for i in range(n))
    assert len(output) == counts.completed
    assert {row["error"]["code"] for row in errors} == {"batch_expired"}


def test_a_big_job_never_has_more_lines_in_the_engine_than_the_bound(client, http):
    admin = http
    after = admin.get("/admin/steps", params={"limit": 1}).json()["latest_seq"]
    batch = client.batches.create(
        input_file_id=upload(client, completion_lines(150, max_tokens=8, prefix="b")).id,
        endpoint="/v1/completions", completion_window="1h",
    )  # fmt: skip
    pending_seen = []

    def sample(current) -> bool:
        text = admin.get("/metrics").text
        pending_seen.append(metric(text, "batchgate_batch_job_lines_pending"))
        assert metric(text, "batchgate_batch_job_lines_inflight") <= INFLIGHT
        assert metric(text, "batchgate_batch_job_max_inflight") == INFLIGHT
        return False

    batch = wait_batch(client, batch.id, until=sample)
    assert batch.status == "completed" and batch.request_counts.completed == 150
    assert max(pending_seen) > INFLIGHT  # the job's own queue held what the engine did not
    records = []
    while True:
        page = admin.get("/admin/steps", params={"after": after, "limit": 10000}).json()
        assert page["missed"] == 0
        records += page["records"]
        if not page["records"]:
            break
        after = page["records"][-1]["seq"]
    in_engine = [r["num_running"]["batch"] + r["num_waiting"]["batch"] for r in records]
    assert max(in_engine) == INFLIGHT  # the bound was reached and never passed
    assert all(r["num_running"]["interactive"] + r["num_waiting"]["interactive"] == 0
               for r in records)  # fmt: skip
    text = admin.get("/metrics").text
    assert metric(text, "batchgate_batch_jobs", status="completed") >= 1
    assert metric(text, "batchgate_batch_job_lines_total", outcome="completed") >= 150
    assert metric(text, "batchgate_batch_job_output_tokens_total") >= 150 * 8
    assert metric(text, "batchgate_ttft_seconds_count", priority="batch") >= 150


def test_an_interactive_request_during_a_job_is_served_in_the_interactive_class(client, http):
    before = metric(http.get("/metrics").text, "batchgate_ttft_seconds_count",
                    priority="interactive")  # fmt: skip
    after = http.get("/admin/steps", params={"limit": 1}).json()["latest_seq"]
    batch = client.batches.create(
        input_file_id=upload(client, completion_lines(60, max_tokens=32, prefix="i")).id,
        endpoint="/v1/completions", completion_window="1h",
    )  # fmt: skip
    wait_batch(client, batch.id, until=lambda b: b.request_counts.completed >= 2)
    response = http.post("/v1/completions", json={"prompt": "now", "max_tokens": 8})
    assert response.status_code == 200
    assert wait_batch(client, batch.id).status == "completed"
    text = http.get("/metrics").text
    assert metric(text, "batchgate_ttft_seconds_count", priority="interactive") == before + 1
    records = http.get("/admin/steps", params={"after": after, "limit": 10000}).json()["records"]
    shared = [r for r in records if r["num_running"]["interactive"] and r["num_running"]["batch"]]
    assert shared, "the interactive request never ran beside the job"
    assert max(r["num_running"]["interactive"] + r["num_waiting"]["interactive"]
               for r in records) == 1  # fmt: skip


def test_files_and_finished_jobs_are_removed_after_the_retention_period(servers):
    server = servers["retention"].wait_ready()
    with server.client() as client:
        uploaded = upload(client, completion_lines(1, max_tokens=1))
        assert uploaded.expires_at - uploaded.created_at in (1, 2, 3)
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="1h"
        )
        path = server.data_dir / "files" / f"{uploaded.id}.jsonl"
        assert path.exists()

        def gone(retrieve, item_id) -> bool:
            try:
                retrieve(item_id)
            except openai.NotFoundError:
                return True
            return False

        assert wait_until(lambda: gone(client.files.retrieve, uploaded.id), timeout_seconds=30)
        assert not path.exists()
        assert wait_until(lambda: gone(client.batches.retrieve, batch.id), timeout_seconds=30)


def test_deleting_a_file_removes_it_unless_an_unfinished_job_reads_it(client):
    # A job that runs for thousands of steps at 4 lines in flight, and a client that does not
    # retry: the SDK retries a 409 after a back-off, and a short job could finish meanwhile
    # (the test then passed or failed with the machine's speed).
    no_retry = client.with_options(max_retries=0)
    uploaded = upload(client, completion_lines(200, max_tokens=64, prefix="d"))
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="1h"
    )
    with pytest.raises(openai.ConflictError):
        no_retry.files.delete(uploaded.id)
    client.batches.cancel(batch.id)
    wait_batch(client, batch.id)
    deleted = client.files.delete(uploaded.id)
    assert deleted.deleted is True and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(uploaded.id)


def test_data_dir_holds_sqlite_and_files(server):
    data = Path(server.data_dir)
    assert (data / "batch.sqlite3").exists() and (data / "files").is_dir()
    assert "batch API data directory" in server.log()


def test_batch_api_priority_interactive_runs_job_lines_in_the_chat_queue(client, http):
    # The deliberately bad setting the default `jobs_interactive` preset applies, live.
    changed = http.put("/admin/batching", json={"batch_api_priority": "interactive"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["previous"]["batch_api_priority"] == "batch"
    try:
        before = metric(http.get("/metrics").text, "batchgate_ttft_seconds_count",
                        priority="interactive")  # fmt: skip
        after = http.get("/admin/steps", params={"limit": 1}).json()["latest_seq"]
        batch = client.batches.create(
            input_file_id=upload(client, completion_lines(20, max_tokens=4, prefix="q")).id,
            endpoint="/v1/completions", completion_window="1h",
        )  # fmt: skip
        assert wait_batch(client, batch.id).status == "completed"
        text = http.get("/metrics").text
        assert metric(text, "batchgate_ttft_seconds_count", priority="interactive") == before + 20
        page = http.get("/admin/steps", params={"after": after, "limit": 10000}).json()
        assert all(r["num_running"]["batch"] + r["num_waiting"]["batch"] == 0
                   for r in page["records"])  # fmt: skip
        assert max(r["num_running"]["interactive"] for r in page["records"]) >= 1
    finally:
        http.put("/admin/batching", json={"batch_api_priority": "batch"})
    bad = http.put("/admin/batching", json={"batch_api_priority": "offline"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "batch_api_priority"
