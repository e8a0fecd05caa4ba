"""Scheduling policies over a fake model runner: continuous / dynamic / static membership,
priority classes and anti-starvation, preemption by recompute, budgets, abort and deadline."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.sampling_params import SamplingParams
from tests.reference_server.fakes import FakeRunner, make_engine, run_to_completion

PROMPT = [10, 11, 12, 13, 14]


def _ids(record_call):
    return {request_id for request_id, *_ in record_call}


def _params(max_tokens: int = 4, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=1, **kwargs)


# -- continuous ---------------------------------------------------------------------------


def test_continuous_admits_new_requests_mid_flight_and_drops_finished_at_once():
    runner = FakeRunner()
    engine = make_engine(runner=runner, enable_prefix_caching=False)  # "late" would share PROMPT
    engine.add_request("long", PROMPT, _params(max_tokens=10))
    engine.step()
    engine.step()
    engine.add_request("late", PROMPT, _params(max_tokens=2))
    engine.step()
    assert _ids(runner.calls[-1]) == {"long", "late"}  # joined while "long" was decoding
    late_chunk = next(c for c in runner.calls[-1] if c[0] == "late")
    assert late_chunk[1:] == (0, len(PROMPT), True)
    engine.step()  # "late" samples its 2nd and last token
    engine.step()
    assert _ids(runner.calls[-1]) == {"long"}
    results, _ = run_to_completion(engine)
    assert results["long"][2] == "length"


def test_token_budget_chunk_cap_and_max_num_seqs_are_respected():
    runner = FakeRunner(num_kv_blocks=1024)
    engine = make_engine(  # no prefix caching: the prompts share their beginnings
        runner=runner,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        max_prefill_chunk_tokens=6,
        enable_prefix_caching=False,
    )
    for i in range(10):
        engine.add_request(f"r{i}", list(range(1, 1 + 5 + 3 * i)), _params(max_tokens=5))
    results, records = run_to_completion(engine)
    assert len(results) == 10 and all(r[2] == "length" for r in results.values())
    for call, record in zip(runner.calls, records, strict=True):
        assert sum(count for _, _, count, _ in call) <= 16
        assert len(call) <= 4 and record.num_seqs == len(call)
        assert all(count <= 6 for _, _, count, _ in call)
        assert record.num_prefill_tokens + record.num_decode_tokens == sum(c[2] for c in call)
    # Long prompts were split into several chunks.
    starts = [start for call in runner.calls for rid, start, _, _ in call if rid == "r9"]
    assert len([s for s in starts if s < 5 + 27]) >= 6


def test_decodes_are_served_before_prefill_chunks_fill_the_budget():
    runner = FakeRunner(num_kv_blocks=1024)
    engine = make_engine(runner=runner, max_num_seqs=8, max_num_batched_tokens=8)
    for i in range(4):
        engine.add_request(f"d{i}", [1, 2], _params(max_tokens=20))
    engine.step()  # the four 2-token prompts prefill together
    engine.add_request("big", list(range(1, 60)), _params(max_tokens=2))
    for _ in range(5):
        engine.step()
        call = runner.calls[-1]
        assert {rid for rid, _, count, _ in call if count == 1} >= {f"d{i}" for i in range(4)}
        assert [count for rid, _, count, _ in call if rid == "big"] == [4]


# -- dynamic ------------------------------------------------------------------------------


def test_dynamic_waits_for_its_window_then_dispatches():
    # A 10 s window: the steps below all fall inside it however slow the machine is.
    engine = make_engine(policy="dynamic", interactive={"max_batch_size": 4, "max_wait_ms": 10_000})
    engine.add_request("a", PROMPT, _params())
    engine.add_request("b", PROMPT, _params())
    assert engine.step().record is None  # window still open
    assert 0.0 < engine.next_wakeup_seconds() <= 10.0
    engine.add_request("c", PROMPT, _params(), arrival_time=time.monotonic() - 20.0)
    # "a" is still the oldest queued request, so the window has not passed yet.
    assert engine.step().record is None
    engine.abort("a")
    engine.abort("b")
    record = engine.step().record  # "c" has waited 20 s > 10 s
    assert record is not None and record.num_seqs == 1


def test_dynamic_dispatches_when_batch_is_full_or_at_adaptive_threshold():
    engine = make_engine(policy="dynamic", interactive={"max_batch_size": 3, "max_wait_ms": 10_000})
    for i in range(3):
        engine.add_request(f"r{i}", PROMPT, _params())
    assert engine.step().record.num_seqs == 3

    adaptive = make_engine(
        policy="dynamic",
        interactive={"max_batch_size": 8, "max_wait_ms": 10_000, "dispatch_threshold": 2},
    )
    adaptive.add_request("x", PROMPT, _params())
    assert adaptive.step().record is None
    adaptive.add_request("y", PROMPT, _params())
    assert adaptive.step().record.num_seqs == 2


def test_dynamic_batch_runs_to_completion_without_new_members():
    runner = FakeRunner()
    engine = make_engine(
        runner=runner, policy="dynamic", interactive={"max_batch_size": 2, "max_wait_ms": 0}
    )
    engine.add_request("a", PROMPT, _params(max_tokens=6))
    engine.add_request("b", PROMPT, _params(max_tokens=3))
    engine.step()
    engine.add_request("late", PROMPT, _params(max_tokens=2))
    results, _ = run_to_completion(engine)
    first_late = next(i for i, call in enumerate(runner.calls) if "late" in _ids(call))
    last_a = max(i for i, call in enumerate(runner.calls) if "a" in _ids(call))
    assert first_late == last_a + 1  # joined only after the batch's last member finished
    assert results["late"][2] == "length"


# -- static -------------------------------------------------------------------------------


def test_static_ignores_late_arrivals_until_its_batch_ends():
    runner = FakeRunner()
    engine = make_engine(runner=runner, policy="static", interactive={"max_batch_size": 4})
    engine.add_request("a", PROMPT, _params(max_tokens=8))
    engine.add_request("b", PROMPT, _params(max_tokens=2))
    engine.step()
    assert _ids(runner.calls[0]) == {"a", "b"}  # no window: dispatched at once
    engine.add_request("c", PROMPT, _params(max_tokens=2))
    engine.add_request("d", PROMPT, _params(max_tokens=2))
    run_to_completion(engine)
    batches = [_ids(call) for call in runner.calls]
    end_of_first = max(i for i, ids in enumerate(batches) if "a" in ids)
    assert all(ids <= {"a", "b"} for ids in batches[: end_of_first + 1])
    assert batches[end_of_first + 1] == {"c", "d"}


# -- priority classes ---------------------------------------------------------------------


def test_interactive_is_admitted_before_batch():
    runner = FakeRunner()
    engine = make_engine(runner=runner, max_num_seqs=1, max_num_batched_tokens=64)
    engine.add_request("bg", PROMPT, _params(), priority="batch")
    engine.add_request("chat", PROMPT, _params(), priority="interactive")
    run_to_completion(engine)
    order = [call[0][0] for call in runner.calls]
    assert order.index("chat") < order.index("bg")
    assert order[: order.index("bg")] == ["chat"] * order.index("bg")


def _starvation_run(max_starvation_steps: int, num_steps: int) -> int | None:
    """Interactive traffic keeps one slot busy forever; returns the step "bg" first ran."""
    runner = FakeRunner()
    engine = make_engine(
        runner=runner,
        max_num_seqs=1,
        max_num_batched_tokens=64,
        max_starvation_steps=max_starvation_steps,
    )
    engine.add_request("bg", PROMPT, _params(max_tokens=2), priority="batch")
    counter = 0
    for step in range(num_steps):
        while engine.stats().num_waiting_by_class["interactive"] < 2:
            engine.add_request(f"i{counter}", PROMPT, _params(max_tokens=3))
            counter += 1
        engine.step()
        if "bg" in _ids(runner.calls[-1]):
            return step
    return None


def test_batch_class_is_not_starved_by_constant_interactive_traffic():
    first_run = _starvation_run(max_starvation_steps=10, num_steps=60)
    assert first_run is not None and 10 <= first_run <= 14
    # The control: with a far-away limit the same traffic starves it for the whole run.
    assert _starvation_run(max_starvation_steps=10_000, num_steps=60) is None


def test_shared_queue_makes_interactive_wait_behind_batch():
    runner = FakeRunner()
    engine = make_engine(runner=runner, max_num_seqs=1, shared_queue=True)
    engine.add_request("bg", PROMPT, _params(max_tokens=3), priority="batch")
    engine.add_request("chat", PROMPT, _params(max_tokens=3))
    run_to_completion(engine)
    order = [call[0][0] for call in runner.calls]
    assert order.index("bg") < order.index("chat")


def _batch_running_peaks(**batching: object) -> tuple[int, int]:
    """Eight batch requests, then chat arriving every step for 12 steps, then none: the most
    batch sequences running in one step while chat ran, and after it stopped."""
    engine = make_engine(max_num_seqs=8, max_num_batched_tokens=64, **batching)
    for i in range(8):
        engine.add_request(f"bg{i}", PROMPT, _params(max_tokens=40), priority="batch")
    engine.add_request("chat-first", PROMPT, _params(max_tokens=2))
    with_chat = []
    for step in range(12):
        engine.add_request(f"chat{step}", PROMPT, _params(max_tokens=2))
        engine.step()
        with_chat.append(engine.stats().num_running_by_class["batch"])
    while (
        engine.stats().num_running_by_class["interactive"]
        or engine.stats().num_waiting_by_class["interactive"]
    ):
        engine.step()
    after = []
    for _ in range(5):
        engine.step()
        after.append(engine.stats().num_running_by_class["batch"])
    return max(with_chat), max(after)


def test_batch_sequences_are_capped_while_chat_is_active_and_fill_the_slots_after():
    # Chat first (arrived first): the batch class gets the cap, never more, while chat runs.
    with_chat, after = _batch_running_peaks(
        batch_max_running_with_interactive=2, interactive_active_ms=0
    )
    assert with_chat == 2
    assert after == 8  # work-conserving: no chat, every slot
    # The controls: no cap, or one queue for both classes (the cap does not apply there).
    assert _batch_running_peaks(batch_max_running_with_interactive=None)[0] > 2
    assert _batch_running_peaks(batch_max_running_with_interactive=2, shared_queue=True)[0] > 2


def test_chat_counts_as_active_for_interactive_active_ms_after_its_last_arrival():
    engine = make_engine(
        max_num_seqs=8,
        max_num_batched_tokens=64,
        batch_max_running_with_interactive=1,
        interactive_active_ms=60_000,
    )
    engine.add_request("chat", PROMPT, _params(max_tokens=1))
    run_to_completion(engine)  # the chat is over, but arrived within the last minute
    for i in range(4):
        engine.add_request(f"bg{i}", PROMPT, _params(max_tokens=5), priority="batch")
    engine.step()
    assert engine.stats().num_running_by_class["batch"] == 1
    engine.update_batching({"interactive_active_ms": 0.0})  # live: the window closes at once
    engine.step()
    assert engine.stats().num_running_by_class["batch"] == 4


# -- preemption ---------------------------------------------------------------------------


def test_preemption_picks_lowest_class_latest_arrival_and_counts_recompute():
    # 6 blocks of 4 slots; three 5-token prompts that each grow to 12 tokens cannot all fit.
    # Without prefix caching every token a victim had computed is computed again.
    runner = FakeRunner(num_kv_blocks=6, block_size=4)
    engine = make_engine(runner=runner, enable_prefix_caching=False)
    now = time.monotonic()
    engine.add_request("i-old", PROMPT, _params(max_tokens=7), arrival_time=now)
    engine.add_request("b-old", PROMPT, _params(max_tokens=7), priority="batch", arrival_time=now)
    engine.add_request(
        "b-new", PROMPT, _params(max_tokens=7), priority="batch", arrival_time=now + 1
    )
    preempted = []
    lost: dict[str, int] = {}  # victim -> tokens it had computed, until it is re-admitted
    while engine.has_unfinished():
        computed_before = {s.request_id: s.num_computed_tokens for s in engine.scheduler.running}
        waiting_before = engine.scheduler.waiting()
        result = engine.step()
        if result.record is None:
            continue
        # Counted when the victim is re-admitted (a step that preempts admits no one).
        still_waiting = {s.request_id for s in engine.scheduler.waiting()}
        readmitted = [
            s.request_id
            for s in waiting_before
            if s.request_id in lost and s.request_id not in still_waiting
        ]
        assert result.record.num_recomputed_tokens == sum(lost.pop(r) for r in readmitted)
        if result.record.num_preemptions:
            victims = [s for s in engine.scheduler.waiting() if s.request_id in computed_before]
            assert len(victims) == result.record.num_preemptions
            lost.update({v.request_id: computed_before[v.request_id] for v in victims})
            preempted.extend(v.request_id for v in victims)
            # The victim waits at the front of its class queue.
            assert engine.scheduler.waiting()[0].request_id == preempted[-1]
    assert preempted[0] == "b-new"
    assert not lost
    stats = engine.stats()
    assert stats.num_preemptions_total >= 1
    assert stats.num_recomputed_tokens_total > 0
    # Prefill covers every prompt, every recomputed token, and each victim's one sampled token
    # that was waiting for its decode when it was preempted.
    assert stats.num_prefill_tokens_total == (
        3 * len(PROMPT) + stats.num_recomputed_tokens_total + stats.num_preemptions_total
    )
    assert stats.num_kv_blocks_used == 0
    assert stats.num_finished_total_by_reason["length"] == 3


def test_output_is_identical_alone_in_a_busy_batch_and_after_preemption():
    def run(num_blocks: int, others: int) -> tuple[list[int], int]:
        runner = FakeRunner(num_kv_blocks=num_blocks, block_size=4)
        engine = make_engine(runner=runner)
        for i in range(others):
            engine.add_request(f"o{i}", [7, 8, 9], _params(max_tokens=9))
        engine.add_request("x", PROMPT, _params(max_tokens=9), priority="batch")
        results, _ = run_to_completion(engine)
        return results["x"][0], engine.stats().num_preemptions_total

    alone, _ = run(num_blocks=64, others=0)
    busy, _ = run(num_blocks=64, others=5)
    squeezed, preemptions = run(num_blocks=9, others=3)
    assert len(alone) == 9
    assert busy == alone
    assert preemptions > 0
    assert squeezed == alone


# -- abort and deadline -------------------------------------------------------------------


def test_abort_frees_blocks_before_the_next_step():
    runner = FakeRunner()
    engine = make_engine(runner=runner)
    engine.add_request("a", PROMPT, _params(max_tokens=20))
    engine.add_request("b", PROMPT, _params(max_tokens=20))
    engine.step()
    used = engine.stats().num_kv_blocks_used
    assert engine.abort("a") is True
    assert engine.stats().num_kv_blocks_used < used
    assert engine.abort("a") is False
    result = engine.step()
    aborted = [o for o in result.outputs if o.request_id == "a"]
    assert aborted and aborted[0].finish_reason == "abort" and aborted[0].finished
    assert "a" not in _ids(runner.calls[-1])
    engine.abort("b")
    assert engine.stats().num_kv_blocks_used == 0
    assert engine.stats().num_aborted_total == 2


def test_deadline_finishes_running_and_waiting_requests_and_frees_blocks():
    engine = make_engine(max_num_seqs=1)
    # 0.5 s, not less: the first step must come before the deadline even when a loaded machine
    # (or a collection in this big test process) stalls the test for tens of milliseconds.
    engine.add_request("run", PROMPT, _params(max_tokens=50, deadline_seconds=0.5))
    engine.add_request("wait", PROMPT, _params(max_tokens=50, deadline_seconds=0.5))
    engine.step()
    assert engine.stats().num_kv_blocks_used > 0
    time.sleep(0.55)
    outputs = engine.step().outputs
    reasons = {o.request_id: o.finish_reason for o in outputs if o.finished}
    assert reasons == {"run": "deadline", "wait": "deadline"}
    assert engine.stats().num_kv_blocks_used == 0
    assert not engine.has_unfinished()


def test_toggling_shared_queue_merges_by_arrival_and_splits_back_by_class():
    engine = make_engine(max_num_seqs=1)
    now = time.monotonic()
    engine.add_request("i1", PROMPT, _params(), arrival_time=now + 1)
    engine.add_request("b1", PROMPT, _params(), priority="batch", arrival_time=now)
    engine.add_request("i2", PROMPT, _params(), arrival_time=now + 2)
    engine.update_batching({"shared_queue": True})
    assert [s.request_id for s in engine.scheduler.waiting()] == ["b1", "i1", "i2"]
    engine.update_batching({"shared_queue": False})
    assert [s.request_id for s in engine.scheduler.waiting()] == ["i1", "i2", "b1"]
    results, _ = run_to_completion(engine)
    assert len(results) == 3 and engine.stats().num_waiting_by_class == {
        "interactive": 0,
        "batch": 0,
    }


_request = st.tuples(
    st.integers(min_value=1, max_value=30),  # prompt length
    st.integers(min_value=1, max_value=12),  # max_tokens
    st.sampled_from(["interactive", "batch"]),
    st.integers(min_value=0, max_value=6),  # step at which it arrives
)


@settings(max_examples=40, deadline=None)
@given(
    requests=st.lists(_request, min_size=1, max_size=12),
    policy=st.sampled_from(["continuous", "dynamic", "static"]),
    num_blocks=st.integers(min_value=12, max_value=40),
    max_num_seqs=st.integers(min_value=1, max_value=6),
    chunk=st.integers(min_value=1, max_value=16),
    shared_queue=st.booleans(),
    abort_index=st.integers(min_value=-1, max_value=11),
    switch_to=st.sampled_from([None, "continuous", "dynamic", "static"]),
    prefix_caching=st.booleans(),
)
def test_random_workloads_finish_without_leaks_and_match_solo_outputs(
    requests, policy, num_blocks, max_num_seqs, chunk, shared_queue, abort_index, switch_to,
    prefix_caching,
):  # fmt: skip
    # Every prompt is 1..n, so with prefix caching on they share their leading blocks.
    def make(blocks: int):
        return make_engine(
            runner=FakeRunner(num_kv_blocks=blocks, block_size=4),
            policy=policy,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max(max_num_seqs, 12),
            max_prefill_chunk_tokens=chunk,
            shared_queue=shared_queue,
            enable_prefix_caching=prefix_caching,
            interactive={"max_batch_size": 3, "max_wait_ms": 0},
            batch={"max_batch_size": 2, "max_wait_ms": 0},
        )

    engine = make(num_blocks)
    pending = sorted(enumerate(requests), key=lambda item: item[1][3])
    results: dict[str, tuple[list[int], str | None]] = {}
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0][1][3] <= step:
            index, (prompt_len, max_tokens, priority, _) = pending.pop(0)
            engine.add_request(
                f"r{index}", list(range(1, 1 + prompt_len)), _params(max_tokens), priority=priority
            )
        if step == 3 and abort_index >= 0:
            engine.abort(f"r{abort_index}")
        if step == 2 and switch_to is not None:  # a live change mid-flight
            engine.update_batching(
                {
                    "policy": switch_to,
                    "shared_queue": not shared_queue,
                    "enable_prefix_caching": not prefix_caching,
                }
            )
        result = engine.step()
        if result.record is not None:
            assert result.record.num_seqs <= max_num_seqs
            assert result.record.num_prefill_tokens + result.record.num_decode_tokens <= max(
                max_num_seqs, 12
            )
        for output in result.outputs:
            tokens, _ = results.get(output.request_id, ([], None))
            results[output.request_id] = (tokens + output.new_token_ids, output.finish_reason)
        step += 1
        assert step < 2000, "no progress"
    stats = engine.stats()
    assert stats.num_kv_blocks_used == 0
    assert stats.num_running_by_class == {"interactive": 0, "batch": 0}
    assert set(results) == {f"r{i}" for i in range(len(requests))} | (
        {f"r{abort_index}"} if 0 <= abort_index < len(requests) else set()
    )
    for index, (prompt_len, max_tokens, _, _) in enumerate(requests):
        tokens, reason = results[f"r{index}"]
        if reason == "abort":
            continue
        assert reason == "length" and len(tokens) == max_tokens
        solo = make(64)
        solo.add_request("solo", list(range(1, 1 + prompt_len)), _params(max_tokens))
        assert run_to_completion(solo)[0]["solo"][0] == tokens
