"""Scheduler.schedule step by step over a fake engine loop: the token budget at its boundary,
remove() of waiting and running requests, admission order and holds, chunked prefill, preemption
bookkeeping and the prefill / decode token split."""

from __future__ import annotations

from reference_server.scheduler import SchedulerOutput
from reference_server.sequence import SequenceStatus
from tests.reference_server.scheduler_fakes import FakeEngineLoop, chunk_sizes, ids

# -- the token budget ---------------------------------------------------------------------


def test_token_budget_spent_exactly_by_decodes_schedules_no_further_decode():
    loop = FakeEngineLoop(max_num_seqs=3, max_num_batched_tokens=12, max_prefill_chunk_tokens=4)
    for name in ("a", "b", "c"):
        loop.add(name, prompt_len=4, max_tokens=10)
    assert chunk_sizes(loop.step()) == {"a": 4, "b": 4, "c": 4}
    loop.scheduler.set_config(
        loop.scheduler.config.merged({"max_num_seqs": 2, "max_num_batched_tokens": 2})
    )
    c_blocks = list(loop.seqs["c"].block_table)
    out = loop.step()
    assert ids(out) == ["a", "b"]  # two tokens of budget: the third decode waits
    assert all(chunk is chunk.seq.decode_chunk for chunk in out.chunks)
    assert (out.num_decode_tokens, out.num_prefill_tokens, out.num_preemptions) == (2, 0, 0)
    assert loop.seqs["c"].block_table == c_blocks
    assert loop.seqs["c"].status is SequenceStatus.RUNNING


def test_token_budget_spent_by_a_prefill_chunk_admits_no_one():
    loop = FakeEngineLoop(max_num_seqs=2, max_num_batched_tokens=8, max_prefill_chunk_tokens=8)
    loop.add("long", prompt_len=20, max_tokens=1)
    loop.add("next", prompt_len=2, max_tokens=1)
    out = loop.step()
    assert chunk_sizes(out) == {"long": 8}
    assert loop.seqs["next"].status is SequenceStatus.WAITING
    assert chunk_sizes(loop.step()) == {"long": 8}  # the running prefill takes it all again
    assert chunk_sizes(loop.step()) == {"long": 4, "next": 2}


def test_prefill_chunk_leaves_one_token_of_budget_per_later_decode():
    loop = FakeEngineLoop(max_num_seqs=4, max_num_batched_tokens=6, max_prefill_chunk_tokens=6)
    loop.add("d1", prompt_len=1, max_tokens=20, priority="batch", arrival_time=0.0)
    loop.add("d2", prompt_len=1, max_tokens=20, priority="batch", arrival_time=1.0)
    loop.step()
    loop.add("chat", prompt_len=20, max_tokens=1, arrival_time=2.0)
    assert chunk_sizes(loop.step()) == {"d1": 1, "d2": 1, "chat": 4}
    out = loop.step()  # running order: chat (interactive, prefilling), d1, d2 (decodes)
    assert chunk_sizes(out) == {"chat": 4, "d1": 1, "d2": 1}
    assert (out.num_prefill_tokens, out.num_decode_tokens) == (4, 2)


def test_prefill_with_no_budget_left_after_reserving_decodes_is_skipped_this_step():
    loop = FakeEngineLoop(max_num_seqs=3, max_num_batched_tokens=3, max_prefill_chunk_tokens=3)
    loop.add("d1", prompt_len=1, max_tokens=20, priority="batch", arrival_time=0.0)
    loop.add("d2", prompt_len=1, max_tokens=20, priority="batch", arrival_time=1.0)
    loop.step()
    loop.add("chat", prompt_len=10, max_tokens=1, arrival_time=2.0)
    assert chunk_sizes(loop.step()) == {"d1": 1, "d2": 1, "chat": 1}
    loop.scheduler.set_config(
        loop.scheduler.config.merged({"max_num_seqs": 2, "max_num_batched_tokens": 2})
    )
    out = loop.step()  # chat comes first but both tokens are the decodes'
    assert ids(out) == ["d1", "d2"]
    assert loop.seqs["chat"].status is SequenceStatus.RUNNING


# -- remove -------------------------------------------------------------------------------


def test_remove_of_a_waiting_request_takes_it_out_of_its_queue_and_the_counts():
    loop = FakeEngineLoop(max_num_seqs=1)
    loop.add("a", max_tokens=5)
    waiting = loop.add("b", max_tokens=5, priority="batch")
    loop.step()
    assert loop.scheduler.num_waiting_by_class == {"interactive": 0, "batch": 1}
    loop.scheduler.remove(waiting)
    assert waiting.status is SequenceStatus.FINISHED
    assert loop.scheduler.waiting() == []
    assert loop.scheduler.num_waiting == 0
    assert loop.scheduler.num_waiting_by_class == {"interactive": 0, "batch": 0}
    assert loop.scheduler.num_running_by_class == {"interactive": 1, "batch": 0}
    assert [s.request_id for s in loop.scheduler.running] == ["a"]
    steps = [ids(out) for out in loop.run()]
    assert all(step == ["a"] for step in steps)


def test_remove_of_a_waiting_request_in_the_shared_queue():
    loop = FakeEngineLoop(max_num_seqs=1, shared_queue=True)
    loop.add("a", max_tokens=5)
    waiting = loop.add("b", max_tokens=5, priority="batch")
    loop.add("c", max_tokens=1)
    loop.step()
    loop.scheduler.remove(waiting)
    assert [s.request_id for s in loop.scheduler.waiting()] == ["c"]
    assert loop.scheduler.num_waiting_by_class == {"interactive": 1, "batch": 0}


def test_remove_of_a_preempted_request_frees_nothing_twice():
    loop = FakeEngineLoop(num_blocks=2, block_size=2, max_num_seqs=2)
    loop.add("a", prompt_len=2, max_tokens=4, arrival_time=0.0)
    loop.add("b", prompt_len=2, max_tokens=4, arrival_time=1.0)
    loop.step()
    out = loop.step()  # both need a second block: b, the tail, is preempted
    assert [s.request_id for s in out.preempted] == ["b"]
    b = loop.seqs["b"]
    assert b.status is SequenceStatus.WAITING and b.block_table == []
    loop.scheduler.remove(b)
    assert loop.block_manager.num_used_blocks == 2  # a's blocks are untouched
    assert loop.scheduler.num_waiting_by_class == {"interactive": 0, "batch": 0}


def test_remove_of_a_running_request_frees_its_blocks_and_clears_its_decode_chunk():
    loop = FakeEngineLoop()
    a = loop.add("a", max_tokens=5)
    loop.add("b", max_tokens=5)
    loop.step()
    loop.step()
    assert a.decode_chunk is not None
    used = loop.block_manager.num_used_blocks
    held = len(a.block_table)
    loop.scheduler.remove(a)
    assert (a.status, a.decode_chunk, a.block_table) == (SequenceStatus.FINISHED, None, [])
    assert loop.block_manager.num_used_blocks == used - held
    assert loop.scheduler.num_running_by_class == {"interactive": 1, "batch": 0}
    assert ids(loop.step()) == ["b"]


def test_remove_of_a_finished_request_only_frees_it():
    loop = FakeEngineLoop()
    a = loop.add("a", max_tokens=1)
    loop.add("b", max_tokens=3)
    loop.step()  # a finishes and is dropped
    assert a.status is SequenceStatus.FINISHED
    loop.scheduler.remove(a)
    assert loop.scheduler.num_running_by_class == {"interactive": 1, "batch": 0}
    assert loop.scheduler.num_waiting_by_class == {"interactive": 0, "batch": 0}


def test_finished_sequences_are_dropped_with_their_blocks_and_counts():
    loop = FakeEngineLoop()
    a = loop.add("a", max_tokens=1, priority="batch")
    loop.add("b", max_tokens=3)
    loop.step()
    assert (a.status, a.block_table, a.decode_chunk) == (SequenceStatus.FINISHED, [], None)
    assert [s.request_id for s in loop.scheduler.running] == ["b"]
    assert loop.scheduler.num_running_by_class == {"interactive": 1, "batch": 0}
    assert loop.block_manager.num_used_blocks == 1


# -- admission ----------------------------------------------------------------------------


def test_admission_holds_at_a_head_that_does_not_fit_so_nothing_overtakes_it():
    loop = FakeEngineLoop(num_blocks=4, block_size=4, max_prefill_chunk_tokens=64)
    loop.add("a", prompt_len=8, max_tokens=3)
    loop.add("big", prompt_len=12, max_tokens=1)  # needs 3 blocks, 2 are free
    loop.add("small", prompt_len=2, max_tokens=1)  # would fit
    out = loop.step()
    assert ids(out) == ["a"]
    assert [s.request_id for s in out.admitted] == ["a"]
    assert [s.request_id for s in loop.scheduler.waiting()] == ["big", "small"]


def test_admission_stops_at_max_num_seqs():
    loop = FakeEngineLoop(max_num_seqs=2)
    for name in ("a", "b", "c"):
        loop.add(name, max_tokens=2)
    assert ids(loop.step()) == ["a", "b"]
    assert loop.scheduler.num_running == 2 and loop.scheduler.num_waiting == 1


def test_admitted_sequence_records_first_schedule_time_and_prefill_end_once():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_num_seqs=2)
    a = loop.add("a", prompt_len=2, max_tokens=3, arrival_time=0.0)
    b = loop.add("b", prompt_len=2, max_tokens=3, arrival_time=1.0)
    loop.step(now=5.0)
    assert (a.first_scheduled_time, b.first_scheduled_time) == (5.0, 5.0)
    assert (a.prefill_end, b.prefill_end) == (2, 2)
    loop.step(now=6.0)  # a takes the last block; b, the tail, needs one too: preempted
    assert b.num_preemptions == 1
    outputs = loop.run(now=7.0)
    readmitted = next(out for out in outputs if b in out.admitted)
    assert readmitted.num_prefill_tokens == 3
    assert b.first_scheduled_time == 5.0  # the first time, not the re-admission
    assert b.prefill_end == 3  # prompt + the token sampled before the preemption


def test_interactive_head_is_admitted_before_an_older_batch_head():
    loop = FakeEngineLoop(max_num_seqs=1)
    loop.add("bg", priority="batch", arrival_time=0.0, max_tokens=1)
    loop.add("chat", arrival_time=1.0, max_tokens=1)
    assert ids(loop.step()) == ["chat"]
    assert ids(loop.step()) == ["bg"]


def test_starved_batch_class_is_admitted_first_after_max_starvation_steps():
    loop = FakeEngineLoop(max_num_seqs=1, max_starvation_steps=2)
    loop.add("bg", priority="batch", max_tokens=1)
    first = []
    for step in range(6):
        while loop.scheduler.num_waiting_by_class["interactive"] < 1:
            loop.add(f"i{step}", max_tokens=1)
        first.append(ids(loop.step()))
    assert first[:3] == [["i0"], ["i1"], ["bg"]]


def test_starvation_count_restarts_when_the_batch_queue_empties():
    loop = FakeEngineLoop(max_num_seqs=1, max_starvation_steps=2)
    loop.add("i0", max_tokens=1)
    loop.add("bg0", priority="batch", max_tokens=1)
    assert ids(loop.step()) == ["i0"]  # bg0 starved 1 step
    loop.scheduler.remove(loop.seqs["bg0"])
    loop.add("i1", max_tokens=1)
    assert ids(loop.step()) == ["i1"]  # empty batch queue: the count restarts
    loop.add("i2", max_tokens=1)
    loop.add("i3", max_tokens=1)
    loop.add("bg1", priority="batch", max_tokens=1)
    assert ids(loop.step()) == ["i2"]  # 1 step
    assert ids(loop.step()) == ["i3"]  # 2 steps
    loop.add("i4", max_tokens=1)
    assert ids(loop.step()) == ["bg1"]


def test_admitting_a_batch_request_ends_its_starvation():
    loop = FakeEngineLoop(max_num_seqs=2, max_starvation_steps=2)
    loop.add("i0", max_tokens=50)
    loop.add("b0", priority="batch", max_tokens=1)
    loop.add("b1", priority="batch", max_tokens=50)
    assert ids(loop.step()) == ["i0", "b0"]  # a batch request got in: the count stays 0
    for step in range(2):
        loop.add(f"i{step + 1}", max_tokens=50)
    assert ids(loop.step()) == ["i0", "i1"]  # b1 starved 1 step
    loop.scheduler.remove(loop.seqs["i1"])
    assert ids(loop.step()) == ["i0", "i2"]  # b1 starved 2 steps: the limit
    loop.scheduler.remove(loop.seqs["i2"])
    loop.add("i3", max_tokens=50)
    assert ids(loop.step()) == ["i0", "b1"]


def test_shared_queue_admits_strictly_by_arrival():
    loop = FakeEngineLoop(max_num_seqs=1, shared_queue=True, max_starvation_steps=1)
    loop.add("bg", priority="batch", arrival_time=0.0, max_tokens=1)
    loop.add("chat", arrival_time=1.0, max_tokens=1)
    loop.add("bg2", priority="batch", arrival_time=2.0, max_tokens=1)
    assert [ids(out) for out in loop.run()] == [["bg"], ["chat"], ["bg2"]]


# -- preemption ---------------------------------------------------------------------------


def test_preemption_takes_the_tail_and_accounts_for_it():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_num_seqs=3)
    a = loop.add("a", prompt_len=2, max_tokens=6, arrival_time=0.0)
    b = loop.add("b", prompt_len=2, max_tokens=6, arrival_time=1.0, priority="batch")
    c = loop.add("c", prompt_len=2, max_tokens=6, arrival_time=2.0)
    loop.step()
    assert [s.request_id for s in loop.scheduler.running] == ["a", "c", "b"]
    out: SchedulerOutput = loop.step()  # each needs a second block; only 0 are free
    assert [s.request_id for s in out.preempted] == ["b", "c"]
    # Recompute is counted when a victim is re-admitted: what it had computed, less what it
    # finds cached (caching is off here).
    assert (out.num_preemptions, out.num_recomputed_tokens, out.num_preempted_decodes) == (2, 0, 2)
    assert (b.num_lost_tokens, c.num_lost_tokens) == (2, 2)
    assert ids(out) == ["a"]
    assert out.admitted == []  # no admission in a step that preempted
    for victim in (b, c):
        assert (victim.status, victim.num_computed_tokens, victim.num_preemptions) == (
            SequenceStatus.WAITING,
            0,
            1,
        )
    assert [s.request_id for s in loop.scheduler.waiting()] == ["c", "b"]
    assert loop.scheduler.num_waiting_by_class == {"interactive": 1, "batch": 1}
    assert loop.scheduler.num_running_by_class == {"interactive": 1, "batch": 0}
    assert a.block_table == [0, 2]  # the block b gave back


def test_a_prefill_chunk_shrinks_to_the_free_slots_instead_of_preempting():
    loop = FakeEngineLoop(num_blocks=4, block_size=4, max_prefill_chunk_tokens=6)
    loop.add("a", prompt_len=4, max_tokens=30, arrival_time=0.0)
    loop.add("big", prompt_len=14, max_tokens=1, arrival_time=1.0)
    assert chunk_sizes(loop.step()) == {"a": 4, "big": 6}  # 1 + 2 blocks
    out = loop.step()  # a's decode takes the last block; big's 2 blocks hold 2 more tokens
    assert out.num_preemptions == 0
    assert chunk_sizes(out) == {"a": 1, "big": 2}


def test_a_decode_that_needs_a_block_preempts_the_tail_then_runs():
    loop = FakeEngineLoop(num_blocks=2, block_size=2, max_num_seqs=2)
    loop.add("a", prompt_len=2, max_tokens=3, arrival_time=0.0)
    loop.add("b", prompt_len=1, max_tokens=3, arrival_time=1.0)
    loop.step()
    out = loop.step()  # a needs a second block: b goes
    assert [s.request_id for s in out.preempted] == ["b"]
    assert chunk_sizes(out) == {"a": 1}
    assert out.num_decode_tokens == 1


def test_the_tail_that_cannot_grow_preempts_itself_even_on_its_last_token_of_budget():
    loop = FakeEngineLoop(num_blocks=2, block_size=2, max_num_seqs=2)
    loop.add("a", prompt_len=1, max_tokens=3, arrival_time=0.0)
    b = loop.add("b", prompt_len=2, max_tokens=3, arrival_time=1.0)
    loop.step()
    loop.scheduler.set_config(
        loop.scheduler.config.merged({"max_num_seqs": 2, "max_num_batched_tokens": 2})
    )
    out = loop.step()  # a decodes in its block (1 token of budget left); b needs a new block
    assert [s.request_id for s in out.preempted] == ["b"]
    assert ids(out) == ["a"]
    assert (out.num_preemptions, out.num_preempted_decodes, out.num_recomputed_tokens) == (1, 1, 0)
    assert b.block_table == [] and b.status is SequenceStatus.WAITING
    readmitted = next(later for later in loop.run() if b in later.admitted)
    assert readmitted.num_recomputed_tokens == 2


def test_recomputed_tokens_after_preemption_count_as_prefill():
    loop = FakeEngineLoop(num_blocks=2, block_size=2, max_num_seqs=2)
    loop.add("a", prompt_len=2, max_tokens=2, arrival_time=0.0)
    b = loop.add("b", prompt_len=2, max_tokens=3, arrival_time=1.0)
    loop.step()
    loop.step()  # b preempted with 3 tokens (2 prompt + 1 sampled); a finishes
    assert b.num_preemptions == 1
    out = loop.step()
    assert out.admitted == [b]
    assert chunk_sizes(out) == {"b": 3}
    assert (out.num_prefill_tokens, out.num_decode_tokens) == (3, 0)


def test_decode_chunk_is_one_reused_object_per_sequence():
    loop = FakeEngineLoop()
    a = loop.add("a", max_tokens=4)
    loop.step()
    first = loop.step().chunks[0]
    second = loop.step().chunks[0]
    assert first is second is a.decode_chunk
    assert (first.num_new_tokens, first.sample) == (1, True)


def test_prefill_chunks_sample_only_at_the_end_of_the_prompt():
    loop = FakeEngineLoop(max_prefill_chunk_tokens=4)
    loop.add("a", prompt_len=10, max_tokens=1)
    outs = loop.run()
    chunks = [(c.num_new_tokens, c.sample) for out in outs for c in out.chunks]
    assert chunks == [(4, False), (4, False), (2, True)]
    assert [out.num_prefill_tokens for out in outs] == [4, 4, 2]
    assert [out.num_decode_tokens for out in outs] == [0, 0, 0]


def test_a_last_single_prompt_token_counts_as_prefill_next_to_other_prefill():
    loop = FakeEngineLoop(max_prefill_chunk_tokens=4)
    loop.add("x", prompt_len=12, max_tokens=1, arrival_time=0.0)
    loop.add("y", prompt_len=5, max_tokens=2, arrival_time=1.0)
    loop.step()
    out = loop.step()  # x: 4 more prompt tokens; y: its 5th and last prompt token
    assert chunk_sizes(out) == {"x": 4, "y": 1}
    assert (out.num_prefill_tokens, out.num_decode_tokens) == (5, 0)
    out = loop.step()  # x: last 4; y: its first real decode
    assert (out.num_prefill_tokens, out.num_decode_tokens) == (4, 1)


def test_decodes_on_the_fast_and_the_slow_path_both_count_as_decode_tokens():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_num_seqs=3)
    loop.add("a", prompt_len=1, max_tokens=5, arrival_time=0.0)
    loop.add("b", prompt_len=2, max_tokens=5, arrival_time=1.0)
    loop.add("c", prompt_len=2, max_tokens=5, arrival_time=2.0)
    loop.step()
    out = loop.step()  # a fits in its block; b needs one: c is preempted for it
    assert [s.request_id for s in out.preempted] == ["c"]
    assert chunk_sizes(out) == {"a": 1, "b": 1}
    assert (out.num_prefill_tokens, out.num_decode_tokens) == (0, 2)


def test_continuous_batching_assigns_no_batch_membership():
    loop = FakeEngineLoop()
    a = loop.add("a", max_tokens=3)
    loop.step(now=1.0)  # past any dynamic window
    assert a.batch_id is None
    loop.add("b", max_tokens=3)
    loop.step()
    assert loop.seqs["b"].batch_id is None


def test_prefills_between_decodes_leave_a_token_for_each_decode_behind_them():
    loop = FakeEngineLoop(max_num_seqs=5, max_num_batched_tokens=16, max_prefill_chunk_tokens=4)
    loop.add("p1", prompt_len=20, max_tokens=1, arrival_time=0.0)
    loop.add("d1", prompt_len=1, max_tokens=9, arrival_time=1.0)
    loop.add("p2", prompt_len=20, max_tokens=1, arrival_time=2.0, priority="batch")
    loop.add("d2", prompt_len=1, max_tokens=9, arrival_time=3.0, priority="batch")
    loop.add("d3", prompt_len=1, max_tokens=9, arrival_time=4.0, priority="batch")
    assert chunk_sizes(loop.step()) == {"p1": 4, "d1": 1, "p2": 4, "d2": 1, "d3": 1}
    loop.scheduler.set_config(loop.scheduler.config.merged({"max_num_batched_tokens": 9}))
    out = loop.step()
    # p1: 9 - 3 decodes = 6, capped at 4; p2: what is left (4) less d2 and d3 = 2.
    assert ids(out) == ["p1", "d1", "p2", "d2", "d3"]
    assert chunk_sizes(out) == {"p1": 4, "d1": 1, "p2": 2, "d2": 1, "d3": 1}


def test_a_prefill_with_full_blocks_preempts_the_tail_for_room():
    loop = FakeEngineLoop(num_blocks=2, block_size=2, max_prefill_chunk_tokens=2)
    loop.add("p", prompt_len=6, max_tokens=1, arrival_time=0.0)
    loop.add("t", prompt_len=2, max_tokens=5, arrival_time=1.0, priority="batch")
    assert chunk_sizes(loop.step()) == {"p": 2, "t": 2}  # one block each, none free
    out = loop.step()
    assert [s.request_id for s in out.preempted] == ["t"]
    assert chunk_sizes(out) == {"p": 2}


def test_a_two_token_prefill_chunk_shrinks_to_the_one_slot_left():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_prefill_chunk_tokens=3)
    loop.add("p", prompt_len=6, max_tokens=1, arrival_time=0.0)
    loop.add("t", prompt_len=2, max_tokens=5, arrival_time=1.0, priority="batch")
    assert chunk_sizes(loop.step()) == {"p": 3, "t": 2}  # p: 2 blocks, 1 slot free; t: 1
    loop.scheduler.set_config(loop.scheduler.config.merged({"max_prefill_chunk_tokens": 2}))
    out = loop.step()
    assert chunk_sizes(out)["p"] == 1  # shrunk, no preemption on p's behalf
    assert [s.request_id for s in out.preempted] == ["t"]  # t's own decode finds no block


def test_two_requests_of_one_class_preempted_in_one_step_both_count_as_waiting():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_num_seqs=3)
    for i, name in enumerate(("a", "b", "c")):
        loop.add(name, prompt_len=2, max_tokens=4, arrival_time=float(i))
    loop.step()
    out = loop.step()
    assert [s.request_id for s in out.preempted] == ["c", "b"]
    assert loop.scheduler.num_waiting_by_class == {"interactive": 2, "batch": 0}
    assert [s.request_id for s in loop.scheduler.waiting()] == ["b", "c"]
