"""EngineCoreClient against a real engine core process (the tiny CPU model): what crosses the
pipe arrives intact, settings and errors round-trip, statistics come from the snapshot, and a
dead core fails everything pending and says so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from reference_server import (
    AdmissionError,
    BatchingConfig,
    ConfigError,
    Engine,
    EngineConfig,
    EngineDeadError,
    SamplingParams,
)
from reference_server.engine_core import EngineCoreClient

pytestmark = pytest.mark.slow

CONFIG = EngineConfig(
    device="cpu", max_model_len=256, max_tokens_cap=128, torch_num_threads=1,
    batching=BatchingConfig(max_num_batched_tokens=64),
)  # fmt: skip
PROMPTS = {"a": [72, 105, 33, 40], "b": [50, 51, 52]}


@contextlib.contextmanager
def _client():
    client = EngineCoreClient(CONFIG, log_level="warning")
    client.start()
    try:
        yield client
    finally:
        client.shutdown()


async def _collect(client, request_id, params):
    return [o async for o in client.generate(request_id, PROMPTS[request_id], params)]


async def _eventually(check, timeout_seconds=30.0):
    deadline = time.monotonic() + timeout_seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def _offline(params_by_id):
    engine = Engine(CONFIG)
    try:
        for request_id, params in params_by_id.items():
            engine.add_request(request_id, PROMPTS[request_id], params)
        tokens = {request_id: [] for request_id in params_by_id}
        while engine.has_unfinished():
            for output in engine.step().outputs:
                tokens[output.request_id].extend(output.new_token_ids)
        vectors = engine.embed([[1, 2, 3], [4] * 100])
    finally:
        engine.close()
    return tokens, vectors


def test_outputs_embeddings_settings_steps_and_stats_cross_the_process_boundary():
    params = {
        "a": SamplingParams(max_tokens=6, seed=1, ignore_eos=True),
        "b": SamplingParams(max_tokens=4, seed=2, temperature=0.0, ignore_eos=True),
    }
    expected_tokens, expected_vectors = _offline(params)

    async def main(client):
        results = await asyncio.gather(*(_collect(client, rid, p) for rid, p in params.items()))
        # 100 tokens > the 64-token step budget: the job runs in two slices, the result is one.
        vectors = await client.embed([[1, 2, 3], [4] * 100])
        with pytest.raises(ConfigError) as bad:
            await client.update_batching({"interactive": {"max_wait_ms": -1}})
        previous = await client.update_batching({"policy": "static"})
        await _eventually(lambda: client.stats().num_kv_blocks_used == 0)
        records, oldest, latest = client.steps_after(0)
        return results, vectors, bad.value, previous, records, oldest, latest

    with _client() as client:
        assert client.pid != os.getpid() and client.is_alive()
        results, vectors, bad, previous, records, oldest, latest = asyncio.run(main(client))
        assert client.get_batching()["policy"] == "static" and previous["policy"] == "continuous"
        stats = client.stats()
    for (request_id, _), outputs in zip(params.items(), results, strict=True):
        assert [t for o in outputs for t in o.new_token_ids] == expected_tokens[request_id]
        assert outputs[-1].finished and outputs[-1].finish_reason == "length"
    for got, want in zip(vectors, expected_vectors, strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    assert bad.field == "interactive.max_wait_ms"
    assert records and oldest == 1 and latest == records[-1]["seq"] >= 4
    assert stats.num_generation_tokens_total == 10 and stats.num_kv_blocks_total > 0


def test_draining_refuses_new_requests():
    async def main(client):
        await client.drain(5.0)
        with pytest.raises(AdmissionError, match="draining"):
            await _collect(client, "a", SamplingParams(max_tokens=2))

    with _client() as client:
        asyncio.run(main(client))


def test_a_killed_core_fails_pending_work_and_runs_the_death_handler():
    deaths = []

    async def main(client):
        client.on_death(deaths.append)
        started = asyncio.Event()

        async def long_stream():
            params = SamplingParams(max_tokens=128, ignore_eos=True)
            async for _ in client.generate("a", PROMPTS["a"], params):
                started.set()

        task = asyncio.ensure_future(long_stream())
        await asyncio.wait_for(started.wait(), 60)
        os.kill(client.pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError, match="killed by signal 9"):
            await asyncio.wait_for(task, 30)
        await _eventually(lambda: not client.is_alive(), 5.0)
        with pytest.raises(EngineDeadError):
            await client.embed([[1]])
        # The handlers run on the receiver thread once every consumer has its error.
        await _eventually(lambda: deaths, 5.0)

    with _client() as client:
        asyncio.run(main(client))
    assert len(deaths) == 1 and isinstance(deaths[0], EngineDeadError)


def test_a_core_that_cannot_build_its_engine_reports_why():
    bad = EngineConfig(device="cpu", model="tiny", max_model_len=10_000_000)
    client = EngineCoreClient(bad, log_level="critical")
    with pytest.raises(ConfigError) as error:
        client.start()
    assert error.value.field == "max_model_len"
