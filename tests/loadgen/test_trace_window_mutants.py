"""loadgen.traces.window, sessions and request at their edges: a window that starts on the last
request, the exact refusal texts, a clamp at exactly the limit, the nudge of a scaled prompt
case by case, the start a rescaled window keeps, and the turn order of a conversation whose
turns are not in file order."""

from __future__ import annotations

import math

import pytest

from loadgen.errors import ConfigError
from loadgen.traces import (
    Trace,
    TraceRequest,
    TraceSession,
    TraceWindow,
    scale_lengths,
    scale_time,
    select_window,
    session_groups,
    time_scale_for_rate,
)


def _r(index: int, t: float = 0.0, **kw) -> TraceRequest:
    kw.setdefault("input_tokens", 100)
    kw.setdefault("output_tokens", 10)
    return TraceRequest(index=index, timestamp_seconds=t, **kw)


def _trace(stamps: list[float]) -> Trace:
    return Trace(
        path="t.jsonl", format="jsonl", requests=tuple(_r(i, t) for i, t in enumerate(stamps))
    )


def _refusal(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as caught:
        call(*args, **kwargs)
    return str(caught.value)


def test_span_is_the_last_timestamp() -> None:
    assert _trace([0.0, 1.0, 2.5]).span_seconds == 2.5
    assert _trace([0.0, 4.0]).span_seconds == 4.0
    assert Trace(path="x", format="jsonl", requests=()).span_seconds == 0.0
    assert Trace(path="x", format="jsonl", requests=()).skipped_empty == 0


def test_a_window_can_start_on_the_last_request() -> None:
    window = select_window(_trace([0, 1, 2]), 2, 5)
    assert [r.index for r in window.requests] == [2]
    assert (window.start_seconds, window.duration_seconds) == (2.0, 5.0)
    assert type(window.start_seconds) is float and type(window.duration_seconds) is float


def test_a_window_is_half_open_at_both_ends() -> None:
    window = select_window(_trace([0, 1, 2, 3, 4]), 1, 2)
    assert [r.index for r in window.requests] == [1, 2]
    assert [r.timestamp_seconds for r in window.requests] == [0.0, 1.0]
    assert window.duration_seconds == 2.0  # the trace goes on past the window: as asked
    window = select_window(_trace([0, 1, 2, 3, 4]), 0, 4)
    assert [r.index for r in window.requests] == [0, 1, 2, 3]


def test_window_refusal_texts() -> None:
    trace = _trace([0, 1, 2.5])
    assert _refusal(select_window, trace, 3, 1) == (
        "start_seconds: 3 is beyond the last request (the trace t.jsonl spans 0 to 2.5 s)"
    )
    assert _refusal(select_window, _trace([0, 1, 5]), 2, 1.5) == (
        "start_seconds, duration_seconds: the window 2 to 3.5 s holds no request "
        "(the trace t.jsonl spans 0 to 5 s)"
    )
    assert _refusal(select_window, trace, -1, 1) == (
        "start_seconds: must be a finite number >= 0, got -1"
    )
    assert _refusal(select_window, trace, 0, 0) == (
        "duration_seconds: must be a finite number > 0, got 0"
    )
    assert _refusal(select_window, trace, 0, -0.5) == (
        "duration_seconds: must be a finite number > 0, got -0.5"
    )
    assert _refusal(select_window, trace, 0, "1") == (
        "duration_seconds: must be a finite number > 0, got '1'"
    )
    assert _refusal(select_window, trace, 0, False) == (
        "duration_seconds: must be a finite number > 0, got False"
    )
    assert _refusal(select_window, trace, -math.inf, 1) == (
        "start_seconds: must be a finite number >= 0, got -inf"
    )


def test_scale_time_keeps_the_start_and_divides_the_rest() -> None:
    window = select_window(_trace([0, 3, 6, 9, 12]), 3, 6)
    faster = scale_time(window, 3)
    assert faster.start_seconds == 3.0
    assert [r.timestamp_seconds for r in faster.requests] == [0.0, 1.0]
    assert [r.index for r in faster.requests] == [1, 2]
    assert faster.duration_seconds == 2.0
    assert _refusal(scale_time, window, -2) == "time_scale: must be a finite number > 0, got -2"


def test_time_scale_for_rate_is_target_over_rate() -> None:
    window = TraceWindow(requests=(_r(0, output_tokens=30), _r(1, output_tokens=10)),
                         start_seconds=0.0, duration_seconds=8.0)  # fmt: skip
    assert window.output_tokens == 40
    assert time_scale_for_rate(window, 20.0) == 4.0  # 5 tokens/s now
    assert time_scale_for_rate(window, 2.5) == 0.5
    assert _refusal(time_scale_for_rate, window, -1) == (
        "target_output_tokens_per_second: must be a finite number > 0, got -1"
    )


def test_a_clamp_at_exactly_the_limit_is_no_clamp() -> None:
    request = _r(0, input_tokens=50, output_tokens=20)
    scaled = scale_lengths([request], 1.0, max_input_tokens=50, max_output_tokens=20)
    assert (scaled.input_clamped, scaled.output_clamped) == (0, 0)
    assert scaled.requests == (request,)
    scaled = scale_lengths([request], 1.0, max_input_tokens=49, max_output_tokens=19)
    assert (scaled.input_clamped, scaled.output_clamped) == (1, 1)
    assert (scaled.requests[0].input_tokens, scaled.requests[0].output_tokens) == (49, 19)
    scaled = scale_lengths([request, request], 1.0, max_input_tokens=1)
    assert (scaled.input_clamped, scaled.output_clamped) == (2, 0)
    scaled = scale_lengths([request, request], 1.0, max_output_tokens=1)
    assert (scaled.input_clamped, scaled.output_clamped) == (0, 2)


def test_limit_refusal_texts() -> None:
    request = _r(0)
    assert _refusal(scale_lengths, [request], 1.0, max_input_tokens=0) == (
        "max_input_tokens: must be an integer >= 1 or null, got 0"
    )
    assert _refusal(scale_lengths, [request], 1.0, max_output_tokens=False) == (
        "max_output_tokens: must be an integer >= 1 or null, got False"
    )
    assert _refusal(scale_lengths, [request], 1.0, max_output_tokens="5") == (
        "max_output_tokens: must be an integer >= 1 or null, got '5'"
    )
    assert _refusal(scale_lengths, [request], 0) == (
        "length_scale: must be a finite number > 0, got 0"
    )
    assert scale_lengths([request], 1.0, max_input_tokens=1).requests[0].input_tokens == 1
    assert scale_lengths([], 2.0) == scale_lengths([], 2.0, 1, 1)


def test_lengths_round_half_to_even_and_never_below_one() -> None:
    request = _r(0, input_tokens=5, output_tokens=3)
    (r,) = scale_lengths([request], 0.5).requests
    assert (r.input_tokens, r.output_tokens) == (2, 2)  # round(2.5) = 2, round(1.5) = 2
    (r,) = scale_lengths([request], 3.0).requests
    assert (r.input_tokens, r.output_tokens, r.block_tokens, r.hash_ids) == (15, 9, None, ())
    (r,) = scale_lengths([_r(0, input_tokens=1, output_tokens=1)], 0.4).requests
    assert (r.input_tokens, r.output_tokens) == (1, 1)


def _hashed(input_tokens: int, blocks: int, block_tokens: int) -> TraceRequest:
    return _r(
        0, input_tokens=input_tokens, hash_ids=tuple(range(blocks)), block_tokens=block_tokens
    )


@pytest.mark.parametrize(
    ("input_tokens", "blocks", "block", "scale", "expected"),
    [
        # the hash blocks cover the prompt exactly: blocks * the new block size, whatever the
        # rounded target (10 here)
        (40, 4, 10, 0.25, (8, 2, 4)),
        (30, 3, 10, 1.0, (30, 10, 3)),
        (20, 3, 10, 0.05, (2, 1, 2)),  # 2 blocks of 1 cover it; the target 1 is raised
        # a partial last block stays partial: from full * new + 1 to blocks * new - 1
        (25, 3, 10, 1.0, (25, 10, 3)),
        (21, 3, 10, 0.3, (7, 3, 3)),  # target 6 -> 2 * 3 + 1
        (29, 3, 10, 0.3, (8, 3, 3)),  # target 9 -> 3 * 3 - 1
        (26, 3, 10, 0.15, (5, 2, 3)),  # blocks of 2: exactly 2 * 2 + 1
        (25, 3, 10, 0.1, (3, 1, 3)),  # blocks of 1 cannot be partial: 3 blocks of 1
        # unshared tokens follow the blocks: from blocks * new to the target
        (35, 3, 10, 1.0, (35, 10, 3)),
        (35, 3, 10, 0.3, (10, 3, 3)),  # target round(10.5) = 10
        (31, 3, 10, 0.3, (9, 3, 3)),  # target 9 = 3 * 3
        (31, 3, 10, 0.2, (6, 2, 3)),  # target 6 = 3 * 2
        (33, 3, 10, 0.1, (3, 1, 3)),  # target 3
        # surplus hash ids: only min(len, ceil(input / block)) of them count
        (15, 5, 10, 1.0, (15, 10, 2)),
    ],
)
def test_scaled_prompts_keep_their_block_structure(
    input_tokens, blocks, block, scale, expected
) -> None:
    (r,) = scale_lengths([_hashed(input_tokens, blocks, block)], scale).requests
    assert (r.input_tokens, r.block_tokens, len(r.hash_ids)) == expected
    assert r.hash_ids == tuple(range(expected[2]))


def test_a_request_without_hash_ids_or_block_size_scales_its_total_only() -> None:
    (r,) = scale_lengths([_r(0, input_tokens=29, hash_ids=(1, 2), block_tokens=None)], 0.3).requests
    assert (r.input_tokens, r.block_tokens, r.hash_ids) == (9, None, (1, 2))
    (r,) = scale_lengths([_r(0, input_tokens=29, block_tokens=10)], 0.3).requests
    assert (r.input_tokens, r.block_tokens, r.hash_ids) == (9, None, ())


def test_a_session_is_ordered_by_turn_then_file_position() -> None:
    members = [_r(0, 0.0, session="s", turn=2), _r(1, 1.0, session="s", turn=0),
               _r(2, 2.0, session="s", turn=1), _r(3, 3.0, session="s", turn=0)]  # fmt: skip
    (group,) = session_groups(members)
    assert group.session == "s"
    assert [r.index for r in group.requests] == [1, 3, 2, 0]
    assert group.first_timestamp_seconds == 0.0


def test_a_session_with_a_missing_turn_is_in_file_order() -> None:
    members = [_r(0, 0.0, session="s", turn=2), _r(1, 1.0, session="s"),
               _r(2, 2.0, session="s", turn=0)]  # fmt: skip
    (group,) = session_groups(members)
    assert [r.index for r in group.requests] == [0, 1, 2]


def test_the_first_timestamp_is_the_earliest_of_any_turn() -> None:
    session = TraceSession(session="s", requests=(_r(0, 5.0), _r(1, 3.0), _r(2, 4.0)))
    assert session.first_timestamp_seconds == 3.0


def test_sessions_in_the_order_of_their_first_request() -> None:
    requests = [_r(0, session="b", turn=0), _r(1), _r(2, session="a", turn=0),
                _r(3, session="b", turn=1), _r(4), _r(5, session="a", turn=1)]  # fmt: skip
    groups = session_groups(requests)
    assert [(g.session, [r.index for r in g.requests]) for g in groups] == [
        ("b", [0, 3]), (None, [1]), ("a", [2, 5]), (None, [4]),
    ]  # fmt: skip
    assert session_groups([]) == ()
    assert all(isinstance(g, TraceSession) for g in groups)


def test_unshared_tokens_after_blocks_that_rounded_up() -> None:
    # Blocks of 10 at 0.35 become blocks of 4 (round(3.5)): 3 of them are 12 tokens, more than
    # the target round(31 * 0.35) = 11, so the prompt keeps all three blocks whole.
    (r,) = scale_lengths([_hashed(31, 3, 10)], 0.35).requests
    assert (r.input_tokens, r.block_tokens, r.hash_ids) == (12, 4, (0, 1, 2))
    assert type(r.input_tokens) is int
