"""Nothing lost: a server killed with SIGKILL in the middle of a job, or stopped with SIGTERM,
and restarted on the same --data-dir resumes the job, and each custom_id appears exactly once
in its output or error file. Also: one data directory serves one server at a time."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest
from batch_testlib import completion_lines, launch, results, upload, wait_batch

from reference_server.api.batch import DataDirError
from reference_server.api.batch.service import BatchAPI
from reference_server.api.server_config import ServerConfig

NUM_LINES = 300


def _exactly_once(client, batch, prefix: str, count: int) -> None:
    output, errors = results(client, batch)
    ids = [row["custom_id"] for row in output + errors]
    assert len(ids) == count, (len(output), len(errors))
    assert sorted(ids) == sorted(f"{prefix}{i}" for i in range(count))
    assert batch.request_counts.total == count
    assert batch.request_counts.completed + batch.request_counts.failed == count


def test_a_job_resumes_after_sigkill_and_sigterm_with_each_custom_id_exactly_once(tmp_path):
    data_dir = tmp_path / "data"
    args = ["--batch-max-inflight", "16"]
    first = launch(tmp_path / "run1", args, data_dir=data_dir).wait_ready()
    try:
        with first.client() as client:
            uploaded = upload(client, completion_lines(NUM_LINES, max_tokens=4, prefix="k"))
            batch = client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="1h"
            )
            running = wait_batch(client, batch.id, until=lambda b: b.request_counts.completed >= 40)
            assert running.status == "in_progress", "the job ended before the kill"
    finally:
        first.stop(signal.SIGKILL)
    assert first.process.returncode == -signal.SIGKILL

    second = launch(tmp_path / "run2", args, data_dir=data_dir).wait_ready()
    try:
        with second.client() as client:
            assert client.files.retrieve(uploaded.id).bytes == uploaded.bytes
            batch = wait_batch(client, batch.id)
            assert batch.status == "completed", batch
            assert batch.request_counts.completed == NUM_LINES
            _exactly_once(client, batch, "k", NUM_LINES)
            assert "batch jobs resumed" in second.log()
            again = client.batches.create(
                input_file_id=upload(client, completion_lines(400, max_tokens=16, prefix="t")).id,
                endpoint="/v1/completions", completion_window="1h",
            )  # fmt: skip
            wait_batch(client, again.id, until=lambda b: b.request_counts.completed >= 20)
    finally:
        assert second.stop(signal.SIGTERM) == 0, second.log()  # drains, persists, exits 0

    third = launch(tmp_path / "run3", args, data_dir=data_dir).wait_ready()
    try:
        with third.client() as client:
            assert "batch jobs resumed" in third.log()
            batch = wait_batch(client, again.id)
            assert batch.status == "completed", batch
            _exactly_once(client, batch, "t", 400)
    finally:
        assert third.stop() == 0, third.log()


def test_a_data_dir_is_refused_while_another_server_holds_it():
    with tempfile.TemporaryDirectory() as tmp:
        config = ServerConfig(data_dir=tmp)

        def service() -> BatchAPI:
            return BatchAPI(
                config=config, engine=None, batcher=None, metrics=None, request_limits=None,
                model_name="tiny", is_draining=lambda: False,
            )  # fmt: skip

        holder = service()
        assert holder._take_data_dir() == Path(tmp).resolve()
        try:
            with pytest.raises(DataDirError, match="in use by another server"):
                service()._take_data_dir()
        finally:
            os.close(holder._lock_fd)
