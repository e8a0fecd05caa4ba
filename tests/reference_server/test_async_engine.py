"""AsyncEngine: streaming to asyncio consumers, errors before the first output, cancellation
aborts, embed between steps, draining, the dynamic-window wakeup, and dead-loop detection."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from reference_server import (
    AdmissionError,
    AsyncEngine,
    BatchingConfig,
    EngineConfig,
    EngineDeadError,
    EngineFailure,
    RequestValidationError,
    SamplingParams,
)
from tests.reference_server.fakes import FakeRunner, make_engine, run_to_completion

PROMPT = [72, 105, 33]


def _params(max_tokens: int = 6) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=3)


@contextlib.contextmanager
def _started(runner: FakeRunner | None = None, **batching):
    engine = AsyncEngine(
        EngineConfig(watermark_ratio=0.0, batching=BatchingConfig.from_dict(batching)),
        runner=runner or FakeRunner(),
    )
    engine.start()
    try:
        yield engine
    finally:
        engine.shutdown()


async def _collect(engine: AsyncEngine, request_id: str, params: SamplingParams, **kwargs):
    return [o async for o in engine.generate(request_id, PROMPT, params, **kwargs)]


async def _wait_until(predicate, timeout_seconds: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def test_generate_streams_one_output_per_token_matching_the_sync_engine():
    sync = make_engine()
    sync.add_request("a", PROMPT, _params())
    expected, _ = run_to_completion(sync)

    async def main():
        with _started() as engine:
            outputs, other = await asyncio.gather(
                _collect(engine, "a", _params()), _collect(engine, "b", _params(3))
            )
            return outputs, other, engine.stats()

    outputs, other, stats = asyncio.run(main())
    assert [len(o.new_token_ids) for o in outputs] == [1] * 6
    assert [t for o in outputs for t in o.new_token_ids] == expected["a"][0]
    assert outputs[-1].finished and outputs[-1].finish_reason == "length"
    assert not any(o.finished for o in outputs[:-1])
    assert other[-1].num_output_tokens == 3
    assert stats.num_kv_blocks_used == 0


def test_generate_without_streaming_yields_the_whole_answer_once_at_the_end():
    sync = make_engine()
    sync.add_request("a", PROMPT, _params())
    expected, _ = run_to_completion(sync)

    async def main():
        with _started() as engine:
            streamed = [o async for o in engine.generate("s", PROMPT, _params())]
            whole = [o async for o in engine.generate("w", PROMPT, _params(), stream=False)]
            return streamed, whole, engine.stats()

    streamed, whole, stats = asyncio.run(main())
    (once,) = whole
    assert once.finished and once.finish_reason == "length"
    assert once.new_token_ids == expected["a"][0]
    assert once.new_text == "".join(o.new_text for o in streamed)
    assert once.num_output_tokens == 6 and once.first_token_time is not None
    assert stats.num_kv_blocks_used == 0


def test_validation_and_admission_errors_raise_before_the_first_output():
    async def main():
        with _started(interactive={"max_waiting": 0}) as engine:
            with pytest.raises(RequestValidationError):
                await _collect(engine, "bad", SamplingParams(max_tokens=10_000))
            with pytest.raises(AdmissionError) as info:
                await _collect(engine, "full", _params())
            assert info.value.reason == "queue_full"
            assert len(await _collect(engine, "bg", _params(2), priority="batch")) == 2
            assert engine.is_alive()

    asyncio.run(main())


def test_consumer_stopping_early_aborts_and_frees_blocks():
    async def main():
        with _started(FakeRunner(step_sleep_seconds=0.002)) as engine:
            stream = engine.generate("a", PROMPT, _params(200))
            first = await stream.__anext__()
            assert not first.finished
            await stream.aclose()
            await _wait_until(lambda: engine.stats().num_aborted_total == 1)
            await _wait_until(lambda: engine.stats().num_kv_blocks_used == 0)

            task = asyncio.create_task(_collect(engine, "b", _params(200)))
            await _wait_until(lambda: engine.stats().num_running_by_class["interactive"] == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await _wait_until(lambda: engine.stats().num_aborted_total == 2)
            await _wait_until(lambda: engine.stats().num_kv_blocks_used == 0)

    asyncio.run(main())


def test_embed_runs_on_the_engine_thread():
    runner = FakeRunner()

    async def main():
        with _started(runner) as engine:
            vectors = await engine.embed([[1, 2, 3], [4]])
            with pytest.raises(RequestValidationError):
                await engine.embed([])
            return vectors

    vectors = asyncio.run(main())
    assert len(vectors) == 2 and runner.embed_calls == 1


def test_drain_refuses_new_requests_and_aborts_what_outlives_the_timeout():
    async def main():
        with _started(FakeRunner(step_sleep_seconds=0.002)) as engine:
            short = asyncio.create_task(_collect(engine, "short", _params(2)))
            long = asyncio.create_task(_collect(engine, "long", _params(900)))
            await _wait_until(lambda: engine.stats().num_generation_tokens_total >= 1)
            await engine.drain(timeout_seconds=0.2)
            with pytest.raises(AdmissionError) as info:
                await _collect(engine, "late", _params())
            assert info.value.reason == "draining"
            return await short, await long, engine.stats()

    short, long, stats = asyncio.run(main())
    assert short[-1].finish_reason == "length"
    assert long[-1].finish_reason == "abort"
    assert stats.num_kv_blocks_used == 0


def test_dynamic_window_wakes_the_idle_loop_without_a_new_event():
    async def main():
        with _started(policy="dynamic", interactive={"max_batch_size": 8, "max_wait_ms": 60}) as e:
            start = time.monotonic()
            outputs = await _collect(e, "a", _params(2))
            return outputs, time.monotonic() - start, e.steps_after(0)

    outputs, elapsed, (records, _, latest) = asyncio.run(main())
    assert outputs[-1].finish_reason == "length"
    assert outputs[0].first_scheduled_time - outputs[0].arrival_time >= 0.06
    assert elapsed < 2.0
    assert latest == 2 and len(records) == 2  # only steps that did work are recorded


def test_step_listeners_and_live_batching_updates():
    seen = []

    async def main():
        with _started() as engine:
            engine.add_step_listener(lambda record: seen.append(record.seq))
            previous = await engine.update_batching({"policy": "static"})
            assert previous["policy"] == "continuous"
            assert engine.get_batching()["policy"] == "static"
            await _collect(engine, "a", _params(3))
            assert engine.config.batching.policy == "static"
            assert engine.tokenizer.decode([104, 105]) == "hi"

    asyncio.run(main())
    assert seen == [1, 2, 3]


def test_a_failed_forward_pass_fails_its_requests_only_and_the_loop_keeps_serving():
    runner = FakeRunner(fail_on_call=2)

    async def main():
        with _started(runner) as engine:
            with pytest.raises(EngineFailure, match="fake runner failure"):
                await _collect(engine, "a", _params(10))
            assert engine.is_alive()
            runner.fail_on_call = None
            outputs = await _collect(engine, "b", _params(3))
            assert outputs[-1].finish_reason == "length"
            await _wait_until(lambda: engine.stats().num_kv_blocks_used == 0)

    asyncio.run(main())


def test_crashed_loop_is_reported_fails_every_stream_and_calls_the_death_handler():
    runner = FakeRunner()
    deaths = []

    def broken(chunks):  # a runner that breaks the contract: the engine itself cannot go on
        return []

    async def main():
        with _started(runner) as engine:
            engine.on_death(deaths.append)
            runner.execute = broken  # type: ignore[method-assign]
            with pytest.raises(EngineDeadError):
                await _collect(engine, "a", _params(10))
            await _wait_until(lambda: not engine.is_alive())
            with pytest.raises(EngineDeadError):
                await _collect(engine, "b", _params())
            with pytest.raises(EngineDeadError):
                await engine.embed([[1]])

    asyncio.run(main())
    assert len(deaths) == 1 and "runner returned 0 tokens" in str(deaths[0])


def test_a_large_embedding_runs_in_budget_sized_slices_and_answers_in_order():
    runner = FakeRunner()
    slices = []
    original_embed = runner.embed

    def recording_embed(token_id_lists):
        slices.append(sum(len(ids) for ids in token_id_lists))
        return original_embed(token_id_lists)

    runner.embed = recording_embed  # type: ignore[method-assign]

    async def main():
        with _started(runner, max_num_batched_tokens=64) as engine:
            inputs = [[1 + i % 200] * 30 for i in range(40)]  # 1,200 tokens: 20 slices of 2
            embedding = asyncio.ensure_future(engine.embed(inputs))
            outputs = await _collect(engine, "a", _params(5))
            return inputs, outputs, await embedding

    inputs, outputs, vectors = asyncio.run(main())
    assert outputs[-1].finish_reason == "length"
    assert vectors == original_embed(inputs)  # in order, each input's own vector
    assert slices == [60] * 20


def test_embedding_slices_alternate_with_generation_steps():
    # The sync engine, so the interleaving does not depend on thread timing.
    engine = make_engine(max_num_batched_tokens=64)
    engine.add_embedding(1, [[5] * 30 for _ in range(10)])  # 5 slices
    engine.add_request("a", PROMPT, _params(4))
    trace = []
    while engine.has_unfinished():
        before = engine.runner.embed_calls
        result = engine.step()
        trace.append((result.record is not None, engine.runner.embed_calls - before))
        if result.embeddings:
            assert result.embeddings[0][0] == 1 and len(result.embeddings[0][1]) == 10
    assert all(slices <= 1 for _, slices in trace)  # at most one slice per step
    assert trace[:4] == [(True, 1)] * 4  # generation and embedding share the first steps
    assert sum(slices for _, slices in trace) == 5


def test_idle_loop_sleeps_instead_of_polling():
    async def main():
        with _started(policy="dynamic", interactive={"max_batch_size": 8, "max_wait_ms": 100}) as e:
            calls = []
            original = e.engine.next_wakeup_seconds

            def counting():
                calls.append(time.monotonic())
                return original()

            e.engine.next_wakeup_seconds = counting  # type: ignore[method-assign]
            await e.update_batching({"interactive": {"max_wait_ms": 100}})  # wakes the loop once
            await asyncio.sleep(0.15)  # idle: nothing to do until a request arrives
            idle_calls = len(calls)
            await _collect(e, "a", _params(1))  # waits out a 100 ms window
            return idle_calls, len(calls) - idle_calls

    idle_calls, window_calls = asyncio.run(main())
    assert idle_calls <= 3
    assert window_calls <= 10
