"""The batch class's running cap while chat is active (Scheduler._batch_running_limit), step by
step with the fake engine loop: which signal makes chat "active", the window's edge, the cap
never above max_num_seqs, and where the cap does not apply."""

from __future__ import annotations

import pytest
from scheduler_fakes import FakeEngineLoop


def _loop(**batching: object) -> FakeEngineLoop:
    batching.setdefault("max_num_seqs", 6)
    batching.setdefault("max_num_batched_tokens", 256)
    batching.setdefault("batch_max_running_with_interactive", 2)
    batching.setdefault("interactive_active_ms", 0.0)
    return FakeEngineLoop(num_blocks=256, **batching)


def _batch(loop: FakeEngineLoop, n: int = 5, arrival: float = 0.0) -> None:
    for i in range(n):
        loop.add(f"bg{i}", prompt_len=4, max_tokens=50, priority="batch", arrival_time=arrival)


def _running(loop: FakeEngineLoop, priority: str) -> int:
    return loop.scheduler.num_running_by_class[priority]


def test_no_chat_at_all_lets_the_batch_class_fill_every_slot() -> None:
    loop = _loop()
    _batch(loop)
    loop.step(now=100.0)
    assert _running(loop, "batch") == 5


def test_a_waiting_chat_request_caps_the_batch_class() -> None:
    # Chat waits (max_num_seqs is full of... nothing yet: the chat is admitted in the same
    # step): the cap is read when the batch queue's turn comes.
    loop = _loop(max_num_seqs=3)
    for i in range(3):
        loop.add(f"chat{i}", prompt_len=4, max_tokens=50, arrival_time=0.0)
    loop.add("chat-waiting", prompt_len=4, max_tokens=50, arrival_time=0.0)
    _batch(loop)
    loop.step(now=100.0)
    assert _running(loop, "interactive") == 3 and _running(loop, "batch") == 0
    assert loop.scheduler.num_waiting_by_class["interactive"] == 1


def test_a_running_chat_request_caps_the_batch_class() -> None:
    loop = _loop()
    loop.add("chat", prompt_len=4, max_tokens=50, arrival_time=0.0)
    loop.step(now=100.0)  # chat runs, nothing waits
    assert loop.scheduler.num_waiting_by_class["interactive"] == 0
    _batch(loop)
    loop.step(now=100.0)
    assert _running(loop, "interactive") == 1 and _running(loop, "batch") == 2


@pytest.mark.parametrize(("now", "capped"), [(10.4999, True), (10.5, False), (11.0, False)])
def test_a_recent_chat_arrival_caps_the_batch_class_for_interactive_active_ms(now, capped):
    loop = _loop(interactive_active_ms=500.0)
    loop.add("chat", prompt_len=4, max_tokens=1, arrival_time=10.0)
    loop.step(now=10.0)  # the chat ends in its first step
    assert not loop.scheduler.has_unfinished()
    _batch(loop)
    loop.step(now=now)
    assert _running(loop, "batch") == (2 if capped else 5)


def test_the_cap_never_exceeds_max_num_seqs() -> None:
    loop = _loop(max_num_seqs=4, batch_max_running_with_interactive=10)
    loop.add("chat", prompt_len=4, max_tokens=50)
    loop.step(now=0.0)
    _batch(loop)
    loop.step(now=0.0)
    assert _running(loop, "batch") == 3  # the slots left, not more


@pytest.mark.parametrize(
    "batching",
    [
        {"batch_max_running_with_interactive": None},
        {"shared_queue": True},
    ],
)
def test_where_the_cap_does_not_apply(batching: dict[str, object]) -> None:
    loop = _loop(**batching)
    loop.add("chat", prompt_len=4, max_tokens=50)
    loop.step(now=0.0)
    _batch(loop)
    for _ in range(3):
        loop.step(now=0.0)
    assert _running(loop, "batch") >= 3


def test_the_slo_policy_applies_the_cap_as_continuous_does() -> None:
    loop = _loop(policy="slo")
    loop.add("chat", prompt_len=4, max_tokens=50)
    loop.step(now=0.0)
    _batch(loop)
    for _ in range(3):
        loop.step(now=0.0)
    assert _running(loop, "batch") == 2


# -- remove() and strict sampling alignment ---------------------------------------------------


def test_remove_keeps_the_cached_prefix_unless_told_to_discard_it() -> None:
    from reference_server.sampling_params import SamplingParams
    from reference_server.sequence import Sequence

    def probe(loop: FakeEngineLoop) -> int:
        twin = Sequence("twin", list(range(1, 10)), SamplingParams(), priority="interactive",
                        arrival_time=0.0)  # fmt: skip
        return len(loop.block_manager.find_cached_prefix(twin))

    for discard, expected in ((None, 2), (False, 2), (True, 0)):
        loop = FakeEngineLoop(num_blocks=64, enable_prefix_caching=True)
        seq = loop.add("a", prompt_len=9, max_tokens=5)
        loop.step()
        if discard is None:
            loop.scheduler.remove(seq)  # finished or aborted: its full blocks stay cached
        else:
            loop.scheduler.remove(seq, discard_cached=discard)
        assert probe(loop) == expected, discard


def _aligned_loop() -> tuple[FakeEngineLoop, dict[str, object]]:
    from reference_server.sampling_params import SamplingParams
    from reference_server.sequence import Sequence

    loop = FakeEngineLoop(num_blocks=64, sampling_alignment="strict", max_num_seqs=8)
    signatures = {"a1": ("a",), "b": ("b",), "a2": ("a",)}
    for order, (request_id, signature) in enumerate(signatures.items(), start=1):
        seq = Sequence(request_id, [1, 2, 3, 4], SamplingParams(max_tokens=12),
                       priority="interactive", arrival_time=0.0, order=order,
                       signature=signature)  # fmt: skip
        loop.seqs[request_id] = seq
        loop.max_tokens[request_id] = 12
        loop.scheduler.add(seq)
    return loop, signatures


def test_strict_alignment_serves_one_signature_a_step_and_every_sequence_of_it() -> None:
    loop, signatures = _aligned_loop()
    outputs = loop.run()
    assert all(loop.seqs[r].finish_reason == "length" for r in signatures)
    served_together = 0
    for out in outputs:
        chunk_ids = [chunk.seq.request_id for chunk in out.chunks]
        assert len({signatures[r] for r in chunk_ids}) <= 1, chunk_ids  # one signature a step
        if "a1" in chunk_ids:
            # a1 and a2 share a signature: a step that serves a1 serves a2 while it runs, even
            # with b (another signature's, skipped and keeping its KV) between them.
            a2 = loop.seqs["a2"]
            if a2.first_scheduled_time is not None and "a2" not in chunk_ids:
                assert len(a2.output_token_ids) == 12 or a2.num_computed_tokens == 0
            served_together += "a2" in chunk_ids
    assert served_together >= 5
    steps_b = sum(any(c.seq.request_id == "b" for c in out.chunks) for out in outputs)
    assert steps_b >= 12  # b's turns come: it is never starved by the larger group


def test_a_sequence_preempted_twice_counts_both() -> None:
    # Five blocks of 4 tokens, three sequences that each grow to 4 blocks: the youngest gives
    # way twice, the next once, the oldest never.
    loop = FakeEngineLoop(num_blocks=5, block_size=4, max_num_seqs=8, max_num_batched_tokens=64)
    for i in range(3):
        loop.add(f"s{i}", prompt_len=4, max_tokens=10, arrival_time=float(i))
    outputs = loop.run(max_steps=500)
    assert [loop.seqs[f"s{i}"].num_preemptions for i in range(3)] == [0, 1, 2]
    assert sum(out.num_preemptions for out in outputs) == 3


def test_a_single_chat_request_waiting_for_its_signatures_turn_caps_the_batch_class() -> None:
    from reference_server.sampling_params import SamplingParams
    from reference_server.sequence import Sequence

    loop = _loop(sampling_alignment="strict")
    requests = [("chat", "interactive", ("a",))]
    requests += [(f"bg{i}", "batch", ("b",)) for i in range(5)]
    for order, (request_id, priority, signature) in enumerate(requests, start=1):
        seq = Sequence(request_id, [1, 2, 3, 4], SamplingParams(max_tokens=50), priority=priority,
                       arrival_time=0.0, order=order, signature=signature)  # fmt: skip
        loop.seqs[request_id] = seq
        loop.max_tokens[request_id] = 50
        loop.scheduler.add(seq)
    out = loop.step(now=100.0)  # the first turn is the batch signature's: the chat waits
    assert [c.seq.request_id for c in out.chunks] == ["bg0", "bg1"]
    assert loop.scheduler.num_waiting_by_class["interactive"] == 1
