"""Static and dynamic batch membership driven step by step (no model runner, no clock): batch
size caps, waiting queues longer than one batch, members that leave early, policy switches."""

from __future__ import annotations

from tests.reference_server.scheduler_fakes import FakeEngineLoop, ids


def test_static_batching_with_a_queue_longer_than_max_batch_size_runs_batches_in_arrival_order():
    loop = FakeEngineLoop(policy="static", interactive={"max_batch_size": 2})
    for i in range(5):
        loop.add(f"r{i}", max_tokens=2)
    steps = [sorted(ids(out)) for out in loop.run()]
    assert steps == [
        ["r0", "r1"],  # prefill + first token
        ["r0", "r1"],  # second token: both finish
        ["r2", "r3"],
        ["r2", "r3"],
        ["r4"],
        ["r4"],
    ]
    # Batches are numbered from 1 in dispatch order.
    assert [loop.seqs[f"r{i}"].batch_id for i in range(5)] == [1, 1, 2, 2, 3]


def test_static_batch_leaves_the_rest_of_the_queue_waiting():
    loop = FakeEngineLoop(policy="static", interactive={"max_batch_size": 2})
    for i in range(5):
        loop.add(f"r{i}", max_tokens=3)
    out = loop.step()
    assert sorted(ids(out)) == ["r0", "r1"]
    assert [s.request_id for s in loop.scheduler.waiting()] == ["r2", "r3", "r4"]
    assert loop.scheduler.num_waiting_by_class == {"interactive": 3, "batch": 0}
    assert loop.scheduler.num_running_by_class == {"interactive": 2, "batch": 0}
    assert loop.scheduler.next_wakeup_seconds(0.0) == 0.0  # the batch still runs
    assert sorted(ids(loop.step())) == ["r0", "r1"]  # no newcomer while the batch is in flight


def test_static_batch_size_is_capped_by_max_num_seqs():
    loop = FakeEngineLoop(
        policy="static",
        max_num_seqs=2,
        max_num_batched_tokens=64,
        interactive={"max_batch_size": 4},
    )
    for i in range(3):
        loop.add(f"r{i}", max_tokens=2)
    assert sorted(ids(loop.step())) == ["r0", "r1"]
    assert loop.seqs["r2"].batch_id is None


def test_static_batch_waits_for_its_members_held_back_by_the_token_budget():
    loop = FakeEngineLoop(
        policy="static",
        max_num_seqs=2,
        max_num_batched_tokens=4,
        interactive={"max_batch_size": 2},
    )
    loop.add("a", prompt_len=4, max_tokens=3)
    loop.add("b", prompt_len=4, max_tokens=1)
    loop.add("c", prompt_len=4, max_tokens=1)
    assert ids(loop.step()) == ["a"]  # the budget is spent on a's prompt: b waits, a member
    assert loop.seqs["b"].batch_id == loop.seqs["a"].batch_id
    assert loop.seqs["c"].batch_id is None
    steps = [sorted(ids(out)) for out in loop.run()]
    # b joins its batch; c runs only once a and b are both done.
    assert steps[0] == ["a", "b"]
    first_c = next(i for i, step in enumerate(steps) if "c" in step)
    assert all("a" not in step and "b" not in step for step in steps[first_c:])


def test_removing_a_waiting_batch_member_lets_the_next_batch_start():
    loop = FakeEngineLoop(
        policy="static",
        max_num_seqs=2,
        max_num_batched_tokens=4,
        interactive={"max_batch_size": 2},
    )
    loop.add("a", prompt_len=4, max_tokens=2)
    b = loop.add("b", prompt_len=4, max_tokens=2)
    loop.add("c", prompt_len=4, max_tokens=2)
    assert ids(loop.step()) == ["a"]
    loop.scheduler.remove(b)  # aborted while waiting for its turn in the batch
    steps = [ids(out) for out in loop.run()]
    assert steps == [["a"], ["c"], ["c"]]


def test_removing_running_batch_members_ends_the_batch():
    loop = FakeEngineLoop(policy="static", interactive={"max_batch_size": 2})
    a = loop.add("a", max_tokens=50)
    b = loop.add("b", max_tokens=50)
    loop.add("c", max_tokens=1)
    assert sorted(ids(loop.step())) == ["a", "b"]
    loop.scheduler.remove(a)
    assert ids(loop.step()) == ["b"]  # one member still in flight
    loop.scheduler.remove(b)
    assert ids(loop.step()) == ["c"]
    assert loop.block_manager.num_used_blocks == 0


def test_a_finished_non_member_does_not_shorten_the_batch_in_flight():
    loop = FakeEngineLoop(policy="continuous")
    loop.add("old", max_tokens=2)
    loop.step()  # "old" runs under continuous batching: no batch id
    loop.scheduler.set_config(
        loop.scheduler.config.merged({"policy": "static", "interactive": {"max_batch_size": 1}})
    )
    assert loop.seqs["old"].batch_id is not None  # what runs becomes the batch in flight
    loop.add("x", max_tokens=3)
    steps = [ids(out) for out in loop.run()]
    assert steps == [["old"], ["x"], ["x"], ["x"]]


def test_switching_to_continuous_releases_the_waiting_queue_at_once():
    loop = FakeEngineLoop(policy="static", interactive={"max_batch_size": 1})
    loop.add("a", max_tokens=5)
    loop.add("b", max_tokens=5)
    assert ids(loop.step()) == ["a"]
    batch_id = loop.seqs["a"].batch_id
    loop.scheduler.set_config(loop.scheduler.config.merged({"policy": "continuous"}))
    assert loop.seqs["a"].batch_id == batch_id  # no new batch is formed
    assert sorted(ids(loop.step())) == ["a", "b"]


def test_switching_from_dynamic_to_static_keeps_the_running_batch_and_its_members():
    loop = FakeEngineLoop(policy="dynamic", interactive={"max_batch_size": 2, "max_wait_ms": 0})
    loop.add("a", max_tokens=3)
    loop.add("b", max_tokens=3)
    loop.step()
    loop.add("late", max_tokens=1)
    loop.scheduler.set_config(loop.scheduler.config.merged({"policy": "static"}))
    assert sorted(ids(loop.step())) == ["a", "b"]
    steps = [ids(out) for out in loop.run()]
    assert steps == [["a", "b"], ["late"]]


def test_dynamic_dispatches_as_soon_as_the_queue_reaches_max_num_seqs():
    loop = FakeEngineLoop(
        policy="dynamic",
        max_num_seqs=2,
        max_num_batched_tokens=64,
        interactive={"max_batch_size": 8, "max_wait_ms": 1000},
    )
    loop.add("a")
    assert loop.step(now=0.0).chunks == []
    assert loop.scheduler.next_wakeup_seconds(0.0) == 1.0
    loop.add("b")
    assert sorted(ids(loop.step(now=0.0))) == ["a", "b"]


def test_dynamic_window_counts_from_the_oldest_arrival():
    loop = FakeEngineLoop(policy="dynamic", interactive={"max_batch_size": 4, "max_wait_ms": 500})
    loop.add("a", arrival_time=10.0)
    loop.add("b", arrival_time=10.25)
    assert loop.scheduler.next_wakeup_seconds(10.125) == 0.375
    assert loop.step(now=10.375).chunks == []
    assert sorted(ids(loop.step(now=10.5))) == ["a", "b"]
    assert loop.scheduler.next_wakeup_seconds(10.5) == 0.0  # running


def test_dynamic_window_long_past_gives_no_negative_wait():
    loop = FakeEngineLoop(policy="dynamic", interactive={"max_batch_size": 4, "max_wait_ms": 500})
    loop.add("a", arrival_time=0.0)
    assert loop.scheduler.next_wakeup_seconds(60.0) == 0.0


def test_dynamic_adaptive_threshold_dispatches_before_the_window():
    loop = FakeEngineLoop(
        policy="dynamic",
        interactive={"max_batch_size": 8, "max_wait_ms": 1000, "dispatch_threshold": 2},
    )
    loop.add("a")
    assert loop.scheduler.next_wakeup_seconds(0.0) == 1.0
    loop.add("b")
    assert loop.scheduler.next_wakeup_seconds(0.0) == 0.0
    assert sorted(ids(loop.step(now=0.0))) == ["a", "b"]


def test_dynamic_uses_the_batch_class_window_for_batch_requests():
    loop = FakeEngineLoop(
        policy="dynamic",
        interactive={"max_batch_size": 8, "max_wait_ms": 250},
        batch={"max_batch_size": 8, "max_wait_ms": 2000},
    )
    loop.add("bg", priority="batch", arrival_time=0.0)
    assert loop.scheduler.next_wakeup_seconds(0.5) == 1.5
    loop.add("chat", arrival_time=0.5)
    assert loop.scheduler.next_wakeup_seconds(0.5) == 0.25
    assert ids(loop.step(now=0.75)) == ["chat"]


def test_idle_scheduler_has_no_wakeup_under_every_policy():
    for policy in ("continuous", "dynamic", "static"):
        loop = FakeEngineLoop(policy=policy)
        assert loop.scheduler.next_wakeup_seconds(0.0) is None
        assert not loop.scheduler.has_unfinished()
        loop.add("a")
        assert loop.scheduler.has_unfinished()
        loop.run(now=1.0)  # past the dynamic window
        assert loop.scheduler.next_wakeup_seconds(1.0) is None


def test_removing_a_waiting_non_member_does_not_end_the_batch_in_flight():
    loop = FakeEngineLoop(policy="static", interactive={"max_batch_size": 1})
    loop.add("a", max_tokens=3)
    c = loop.add("c", max_tokens=1)
    loop.add("d", max_tokens=1)
    assert ids(loop.step()) == ["a"]
    loop.scheduler.remove(c)  # aborted while waiting for a later batch
    assert ids(loop.step()) == ["a"]
    assert ids(loop.step()) == ["a"]
    assert ids(loop.step()) == ["d"]


def test_continuous_with_a_waiting_request_wakes_at_once():
    loop = FakeEngineLoop(interactive={"max_batch_size": 8, "max_wait_ms": 500})
    loop.add("a", arrival_time=0.0)  # a dynamic window would still be open
    assert loop.scheduler.next_wakeup_seconds(0.0) == 0.0


def test_static_wakes_at_once_for_a_waiting_request():
    loop = FakeEngineLoop(policy="static")
    loop.add("a", arrival_time=0.0)
    assert loop.scheduler.next_wakeup_seconds(0.0) == 0.0


def _held_member_loop() -> FakeEngineLoop:
    """A static batch {a, a2}: a ran and finished, a2 (arrival 6) still waits for budget; "bg"
    (batch class, arrival 0) waits for a later batch."""
    loop = FakeEngineLoop(
        policy="static", max_num_seqs=2, max_num_batched_tokens=4, interactive={"max_batch_size": 2}
    )
    loop.add("bg", priority="batch", arrival_time=0.0)
    loop.add("a", prompt_len=4, max_tokens=1, arrival_time=5.0)
    loop.add("a2", prompt_len=4, max_tokens=1, arrival_time=6.0)
    assert ids(loop.step()) == ["a"]
    assert loop.seqs["a2"].batch_id == loop.seqs["a"].batch_id
    return loop


def test_merging_queues_puts_the_waiting_members_of_the_batch_in_flight_first():
    loop = _held_member_loop()
    loop.scheduler.set_config(loop.scheduler.config.merged({"shared_queue": True}))
    assert [s.request_id for s in loop.scheduler.waiting()] == ["a2", "bg"]
    assert [ids(out) for out in loop.run()] == [["a2"], ["bg"], ["bg"]]


def test_merging_queues_after_the_batch_was_released_orders_by_arrival():
    loop = _held_member_loop()
    loop.scheduler.set_config(loop.scheduler.config.merged({"policy": "continuous"}))
    loop.scheduler.set_config(loop.scheduler.config.merged({"shared_queue": True}))
    assert [s.request_id for s in loop.scheduler.waiting()] == ["bg", "a2"]


def test_merging_queues_puts_preempted_requests_first():
    loop = FakeEngineLoop(num_blocks=3, block_size=2, max_num_seqs=3)
    loop.add("a", prompt_len=2, max_tokens=6, arrival_time=0.0)
    loop.add("b", prompt_len=2, max_tokens=6, arrival_time=1.0, priority="batch")
    loop.add("c", prompt_len=2, max_tokens=6, arrival_time=2.0)
    loop.step()
    assert len(loop.step().preempted) == 2  # b and c
    loop.add("n", arrival_time=0.5)  # earlier than both, never preempted
    loop.scheduler.set_config(loop.scheduler.config.merged({"shared_queue": True}))
    assert [s.request_id for s in loop.scheduler.waiting()] == ["b", "c", "n"]
    loop.scheduler.set_config(loop.scheduler.config.merged({"shared_queue": False}))
    assert [s.request_id for s in loop.scheduler.waiting()] == ["c", "n", "b"]


def test_a_non_member_at_the_interactive_head_does_not_hold_back_members_in_the_batch_queue():
    loop = FakeEngineLoop(
        policy="static", max_num_seqs=2, max_num_batched_tokens=4, batch={"max_batch_size": 2}
    )
    loop.add("bg1", prompt_len=4, max_tokens=2, priority="batch")
    loop.add("bg2", prompt_len=3, max_tokens=2, priority="batch")
    assert ids(loop.step()) == ["bg1"]  # the batch {bg1, bg2}; bg2 waits for budget
    loop.add("chat", max_tokens=1)  # not a member: waits for the next batch
    assert ids(loop.step()) == ["bg1", "bg2"]
    steps = [ids(out) for out in loop.run()]
    assert steps == [["bg2"], ["chat"]]
