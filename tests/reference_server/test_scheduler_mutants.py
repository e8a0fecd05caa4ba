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
