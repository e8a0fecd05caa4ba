"""Prefix caching through the scheduler and the engine: what an admission skips, how preemption
and re-admission count, the policies and classes with shared prefixes, a tiny pool that evicts
instead of refusing, the live toggle, a failed forward, and outputs that do not change."""

from __future__ import annotations

import pytest

from reference_server.engine_core import wire
from reference_server.errors import ConfigError
from reference_server.outputs import RequestOutput
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence
from tests.reference_server.fakes import FakeRunner, make_engine
from tests.reference_server.scheduler_fakes import FakeEngineLoop, chunk_sizes

SHARED = [ord(c) for c in "You are a terse assistant. "]  # 27 tokens: 6 full blocks of 4


def _loop(**kwargs) -> FakeEngineLoop:
    return FakeEngineLoop(enable_prefix_caching=True, **kwargs)


def _params(max_tokens: int = 4) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=1)


# -- the scheduler -------------------------------------------------------------------------


def test_an_admission_skips_the_prefill_of_its_cached_prefix():
    loop = _loop(num_blocks=16, block_size=4)
    loop.add("a", prompt=list(range(1, 11)), max_tokens=1)
    loop.run()
    b = loop.add("b", prompt=[*range(1, 9), 90, 91, 92], max_tokens=2)
    out = loop.step()
    assert out.admitted == [b] and chunk_sizes(out) == {"b": 3}
    assert (out.num_cached_tokens, out.num_prefill_tokens, out.num_decode_tokens) == (8, 3, 0)
    assert b.num_cached_tokens == 8 and b.prefill_end == 11
    assert b.block_table[:2] == [0, 1]  # a's blocks, kept cached after a finished


def test_sequences_admitted_together_share_the_blocks_the_first_one_fills_in_that_step():
    loop = _loop(num_blocks=16, block_size=4)
    a = loop.add("a", prompt=list(range(1, 11)), max_tokens=2)
    b = loop.add("b", prompt=list(range(1, 11)), max_tokens=2, priority="batch")
    out = loop.step()
    assert chunk_sizes(out) == {"a": 10, "b": 2}
    assert (a.num_cached_tokens, b.num_cached_tokens, out.num_cached_tokens) == (0, 8, 8)
    assert b.block_table[:2] == a.block_table[:2]
    assert out.num_prefill_tokens == 12
    loop.run()
    assert loop.block_manager.num_used_blocks == 0
    # The shared two; each one's last block ([9, 10, sampled, _]) never filled.
    assert loop.block_manager.num_cached_free_blocks == 2


def test_chunked_prefill_registers_blocks_chunk_by_chunk():
    loop = _loop(num_blocks=16, block_size=4, max_prefill_chunk_tokens=8)
    loop.add("a", prompt=list(range(1, 21)), max_tokens=1)
    loop.step()  # a: positions 0..8
    b = loop.add("b", prompt=list(range(1, 21)), max_tokens=1)
    out = loop.step()  # a: 8..16, registered when scheduled; b is admitted after it
    assert chunk_sizes(out) == {"a": 8, "b": 4}
    assert b.num_cached_tokens == 16  # 4 blocks: the whole prompt but its last (partial) block


def test_a_preempted_sequence_finds_its_own_blocks_and_recomputes_only_the_rest():
    loop = _loop(num_blocks=4, block_size=2, max_num_seqs=2)
    loop.add("a", prompt=[1, 2, 3, 4], max_tokens=3, arrival_time=0.0)
    b = loop.add("b", prompt=[10, 11, 12, 13], max_tokens=3, priority="batch", arrival_time=1.0)
    loop.step()  # a: blocks 0, 1; b: blocks 2, 3 (both registered)
    out = loop.step()  # a's decode needs a block: b goes, its blocks stay cached (LRU 3, 2)
    assert out.preempted == [b]
    assert out.num_recomputed_tokens == 0 and b.num_lost_tokens == 4  # counted on re-admission
    assert loop.block_manager.num_cached_free_blocks == 1  # a took b's tail block (3)
    out = loop.step()  # b could share block 2 but not fit the rest; a finishes
    assert out.admitted == []
    out = loop.step()
    assert out.admitted == [b]
    # b had computed 4 tokens; its first block was still cached: 2 are computed again, plus the
    # token it had sampled and not yet computed.
    assert (out.num_cached_tokens, out.num_recomputed_tokens, out.num_prefill_tokens) == (2, 2, 3)
    assert b.block_table[0] == 2
    assert b.num_cached_tokens == 0  # usage reports its first admission, which found nothing
    loop.run()
    assert loop.block_manager.num_used_blocks == 0


def test_without_caching_a_preempted_sequence_recomputes_everything_it_had_computed():
    loop = FakeEngineLoop(num_blocks=4, block_size=2, max_num_seqs=2)
    loop.add("a", prompt=[1, 2, 3, 4], max_tokens=3, arrival_time=0.0)
    b = loop.add("b", prompt=[10, 11, 12, 13], max_tokens=3, priority="batch", arrival_time=1.0)
    outs = loop.run()
    readmitted = next(out for out in outs[2:] if b in out.admitted)
    assert (readmitted.num_cached_tokens, readmitted.num_recomputed_tokens) == (0, 4)


def test_a_tiny_pool_evicts_cached_blocks_instead_of_refusing_or_preempting():
    loop = _loop(num_blocks=4, block_size=2)
    loop.add("a", prompt=[1, 2, 3, 4, 5, 6], max_tokens=1)
    loop.run()
    assert loop.block_manager.num_cached_free_blocks == 3
    b = loop.add("b", prompt=list(range(20, 28)), max_tokens=1)  # all four blocks
    out = loop.step()
    assert out.admitted == [b] and out.num_preemptions == 0
    # a's blocks were evicted for b's (which stay cached now that b has finished).
    probe = Sequence("p", [1, 2, 3, 4, 5, 6], SamplingParams(), priority="batch", arrival_time=0)
    assert loop.block_manager.find_cached_prefix(probe) == []
    assert loop.block_manager.num_cached_free_blocks == 4


def test_a_running_decode_takes_a_cached_block_when_no_plain_one_is_left():
    loop = _loop(num_blocks=3, block_size=2)
    loop.add("a", prompt=[1, 2, 3], max_tokens=1)
    loop.run()  # block 0 ([1, 2]) stays cached; block 1 (half full) is plain again
    assert loop.block_manager.num_cached_free_blocks == 1
    b = loop.add("b", prompt=[9, 9], max_tokens=5)
    outs = [loop.step() for _ in range(4)]  # admission, then decodes of positions 2, 3, 4
    assert sum(out.num_preemptions for out in outs) == 0
    assert b.block_table == [1, 2, 0]  # position 4 took the cached block, evicting it
    assert loop.block_manager.num_cached_free_blocks == 0


@pytest.mark.parametrize("policy", ["static", "dynamic"])
def test_batch_policies_share_a_prefix_among_the_batch_members(policy):
    loop = _loop(num_blocks=32, block_size=4, policy=policy, interactive={"max_wait_ms": 0})
    members = [loop.add(f"r{i}", prompt=[*range(1, 11), 50 + i], max_tokens=2) for i in range(3)]
    out = loop.step()
    assert out.admitted == members
    assert [m.num_cached_tokens for m in members] == [0, 8, 8]
    assert out.num_cached_tokens == 16 and out.num_prefill_tokens == 11 + 3 + 3
    loop.run()
    assert loop.block_manager.num_used_blocks == 0


# -- the engine ----------------------------------------------------------------------------


def _drive(engine, arrivals: list[tuple[int, str, list[int], str, int]]) -> dict[str, list[int]]:
    """Add (step, id, prompt, priority, max_tokens) at their step; step until done."""
    pending = sorted(arrivals)
    tokens: dict[str, list[int]] = {}
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            _, request_id, prompt, priority, max_tokens = pending.pop(0)
            engine.add_request(request_id, prompt, _params(max_tokens), priority=priority)
        for output in engine.step().outputs:
            tokens.setdefault(output.request_id, []).extend(output.new_token_ids)
        step += 1
        assert step < 5000, "no progress"
    return tokens


def _arrivals() -> list[tuple[int, str, list[int], str, int]]:
    suffixes = ["first question", "second one", "x", "a much longer third question here", "y?"]
    return [
        (step, f"r{i}", SHARED + [ord(c) for c in suffix], "batch" if i % 2 else "interactive",
         5 + i)
        for i, (step, suffix) in enumerate(zip((0, 0, 3, 3, 9), suffixes, strict=True))
    ]  # fmt: skip


@pytest.mark.parametrize("policy", ["continuous", "dynamic", "static", "slo"])
@pytest.mark.parametrize(("num_blocks", "chunk"), [(64, 512), (64, 6), (20, 8), (18, 8)])
def test_outputs_are_the_same_with_the_prefix_cache_on_and_off(policy, num_blocks, chunk):
    def run(enabled: bool):
        engine = make_engine(
            runner=FakeRunner(num_kv_blocks=num_blocks, block_size=4),
            policy=policy,
            max_prefill_chunk_tokens=chunk,
            enable_prefix_caching=enabled,
            interactive={"max_wait_ms": 0},
            batch={"max_wait_ms": 0},
        )
        return _drive(engine, _arrivals()), engine

    off, _ = run(False)
    on, engine = run(True)
    assert on == off
    stats = engine.stats()
    assert stats.num_kv_blocks_used == 0
    assert stats.num_prefix_cache_queries_total == sum(len(a[2]) for a in _arrivals())
    assert 0 < stats.num_prefix_cache_hits_total < stats.num_prefix_cache_queries_total
    records, _, _ = engine.steps_after(0, limit=10_000)
    assert sum(r["num_cached_tokens"] for r in records) >= stats.num_prefix_cache_hits_total
    if stats.num_preemptions_total == 0:
        assert sum(r["num_cached_tokens"] for r in records) == stats.num_prefix_cache_hits_total
        assert stats.num_prefill_tokens_total == (
            stats.num_prefix_cache_queries_total - stats.num_prefix_cache_hits_total
        )


def test_outputs_carry_the_cached_prompt_tokens_and_stats_count_them():
    engine = make_engine(runner=FakeRunner(num_kv_blocks=64, block_size=4))
    engine.add_request("a", [*SHARED, 1], _params(2))
    first = [o for _ in range(4) for o in engine.step().outputs]
    assert {o.num_cached_tokens for o in first} == {0}
    engine.add_request("b", [*SHARED, 2, 3], _params(2))
    outputs = [o for _ in range(4) for o in engine.step().outputs]
    assert {o.num_cached_tokens for o in outputs} == {24}  # 6 blocks of 4 of the 27 shared
    stats = engine.stats()
    assert (stats.num_prefix_cache_queries_total, stats.num_prefix_cache_hits_total) == (57, 24)
    assert stats.num_kv_blocks_used == 0 and stats.num_kv_blocks_cached > 0
    assert stats.num_prompt_tokens_total == 57 and stats.num_prefill_tokens_total == 57 - 24
    # The count crosses the engine core's wire with the rest of the output.
    assert wire.unpack_outputs(wire.pack_outputs(outputs)) == outputs
    assert isinstance(outputs[0], RequestOutput)


def test_the_live_toggle_drops_the_cache_and_starts_empty_again():
    engine = make_engine(runner=FakeRunner(num_kv_blocks=64, block_size=4))
    assert engine.get_batching()["enable_prefix_caching"] is True

    def ask(request_id: str) -> int:
        engine.add_request(request_id, [*SHARED, 9], _params(1))
        outputs = [o for _ in range(3) for o in engine.step().outputs]
        return outputs[-1].num_cached_tokens

    assert ask("a") == 0
    assert ask("b") == 24
    previous = engine.update_batching({"enable_prefix_caching": False})
    assert previous["enable_prefix_caching"] is True
    assert engine.stats().num_kv_blocks_cached == 0
    queries = engine.stats().num_prefix_cache_queries_total
    assert ask("c") == 0
    assert engine.stats().num_kv_blocks_cached == 0
    assert engine.stats().num_prefix_cache_queries_total == queries  # no lookup while off
    with pytest.raises(ConfigError) as caught:
        engine.update_batching({"enable_prefix_caching": "no"})
    assert caught.value.field == "enable_prefix_caching"
    engine.update_batching({"enable_prefix_caching": True})
    assert ask("d") == 0  # an empty cache
    assert ask("e") == 24


def test_turning_caching_off_while_sequences_share_blocks_is_safe():
    engine = make_engine(runner=FakeRunner(num_kv_blocks=64, block_size=4))
    engine.add_request("a", [*SHARED, 1], _params(8))
    engine.step()
    engine.add_request("b", [*SHARED, 2], _params(8))
    engine.step()  # b shares a's blocks
    engine.update_batching({"enable_prefix_caching": False})
    engine.add_request("c", [*SHARED, 3], _params(8))
    while engine.has_unfinished():
        engine.step()
    stats = engine.stats()
    assert (stats.num_kv_blocks_used, stats.num_kv_blocks_cached) == (0, 0)
    assert engine.block_manager.num_free_blocks == 64


def test_a_failed_forward_leaves_no_cached_block_behind():
    runner = FakeRunner(num_kv_blocks=64, block_size=4, fail_on_call=0)
    engine = make_engine(runner=runner)
    engine.add_request("a", [*SHARED, 1], _params(2))
    result = engine.step()  # a's blocks were registered when scheduled; the forward fails
    assert [request_id for request_id, _ in result.failures] == ["a"]
    assert engine.stats().num_kv_blocks_cached == 0
    runner.fail_on_call = None
    engine.add_request("b", [*SHARED, 1], _params(2))
    outputs = [o for _ in range(3) for o in engine.step().outputs]
    assert outputs[-1].num_cached_tokens == 0  # nothing stale was hit
