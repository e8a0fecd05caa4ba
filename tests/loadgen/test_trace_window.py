"""Trace windows and rescaling: the window's requests re-based to 0 with their indexes, time
sped up by `time_scale`, lengths times `length_scale` with hash blocks keeping their share of
the prompt, clamps counted, and conversations grouped in turn order (docs/traces.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.traces import (
    PACKAGED_TRACES,
    Trace,
    TraceRequest,
    packaged_trace_path,
    read_trace,
    scale_lengths,
    scale_time,
    select_window,
    session_groups,
    time_scale_for_rate,
)


def _trace(stamps: list[float], output_tokens: int = 10) -> Trace:
    requests = tuple(
        TraceRequest(index=i, timestamp_seconds=t, input_tokens=100, output_tokens=output_tokens)
        for i, t in enumerate(stamps)
    )
    return Trace(path="t.jsonl", format="jsonl", requests=requests)


def _mooncake() -> Trace:
    return read_trace(packaged_trace_path("mooncake_conversation_excerpt"))


def test_a_window_is_half_open_rebased_and_keeps_indexes():
    window = select_window(_trace([0, 1, 2, 3, 4, 5, 6]), 2, 3)
    assert [r.index for r in window.requests] == [2, 3, 4]
    assert [r.timestamp_seconds for r in window.requests] == [0, 1, 2]
    assert (window.start_seconds, window.duration_seconds) == (2.0, 3.0)


def test_a_window_starts_at_its_start_not_at_its_first_request():
    window = select_window(_trace([0, 10, 12]), 5, 10)
    assert [r.timestamp_seconds for r in window.requests] == [5, 7]


def test_a_window_past_the_trace_end_lasts_until_the_last_request():
    window = select_window(_trace([0, 10, 12]), 5, 100)
    assert window.duration_seconds == 7.0
    assert select_window(_trace([0, 10, 12]), 12, 100).duration_seconds == 100.0


def test_a_window_of_the_mooncake_excerpt():
    window = select_window(_mooncake(), 60, 120)
    assert all(0 <= r.timestamp_seconds < 120 for r in window.requests)
    assert window.requests[0].index > 0 and window.requests[0].timestamp_seconds == 0.0
    assert window.output_tokens == sum(r.output_tokens for r in window.requests)


@pytest.mark.parametrize(
    ("start", "duration", "message"),
    [
        (20, 5, r"start_seconds: 20 is beyond the last request \(the trace t\.jsonl spans 0 to 12"),
        (3, 2, r"start_seconds, duration_seconds: the window 3 to 5 s holds no request .*0 to 12"),
        (-1, 5, "start_seconds: must be a finite number >= 0, got -1"),
        (0, 0, "duration_seconds: must be a finite number > 0, got 0"),
        (0, -3, "duration_seconds: must be a finite number > 0"),
        (math.nan, 5, "start_seconds: must be a finite number"),
        (0, math.inf, "duration_seconds: must be a finite number"),
        (True, 5, "start_seconds: must be a finite number"),
        ("0", 5, "start_seconds: must be a finite number"),
    ],
)
def test_a_window_outside_the_trace_names_the_parameter_and_span(start, duration, message):
    with pytest.raises(ConfigError, match=message):
        select_window(_trace([0, 1, 2, 10, 12]), start, duration)


def test_time_scale_is_a_speed_up_factor():
    window = select_window(_trace([0, 2, 4, 6, 8]), 0, 8)
    faster = scale_time(window, 2.0)
    assert [r.timestamp_seconds for r in faster.requests] == [0, 1, 2, 3]
    assert faster.duration_seconds == 4.0
    slower = scale_time(window, 0.5)
    assert [r.timestamp_seconds for r in slower.requests] == [0, 4, 8, 12]
    assert [r.index for r in slower.requests] == [0, 1, 2, 3]


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, None, True])
def test_time_scale_must_be_a_positive_number(bad):
    window = select_window(_trace([0, 1]), 0, 2)
    with pytest.raises(ConfigError, match="time_scale: must be a finite number > 0"):
        scale_time(window, bad)


def test_time_scale_for_rate_reaches_the_target_output_token_rate():
    window = select_window(_mooncake(), 0, 200)
    for target in (50.0, 1234.5, 80_000.0):
        factor = time_scale_for_rate(window, target)
        timed = scale_time(window, factor)
        assert timed.output_tokens / timed.duration_seconds == pytest.approx(target)
    simple = select_window(_trace([0, 1, 2, 3, 4], output_tokens=10), 0, 4)  # 40 tokens / 4 s
    assert time_scale_for_rate(simple, 5.0) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="target_output_tokens_per_second"):
        time_scale_for_rate(simple, 0)


def _request(input_tokens: int, hash_ids: tuple[int, ...], block_tokens: int = 512):
    return TraceRequest(
        index=0,
        timestamp_seconds=0.0,
        input_tokens=input_tokens,
        output_tokens=500,
        hash_ids=hash_ids,
        block_tokens=block_tokens,
    )


def _blocks_status(r: TraceRequest) -> tuple[int, bool]:
    """(hash blocks used, whether the last one is partial)."""
    used = min(len(r.hash_ids), math.ceil(r.input_tokens / r.block_tokens))
    return used, r.input_tokens < used * r.block_tokens


def test_length_scale_one_changes_nothing():
    requests = _mooncake().requests
    scaled = scale_lengths(requests, 1.0)
    assert scaled.requests == requests
    assert (scaled.input_clamped, scaled.output_clamped) == (0, 0)


def test_length_scale_scales_blocks_with_the_prompt_and_keeps_a_partial_last_block():
    (r,) = scale_lengths([_request(6758, tuple(range(14)))], 1 / 16).requests
    assert (r.input_tokens, r.output_tokens, r.block_tokens) == (422, 31, 32)
    assert r.hash_ids == tuple(range(14))
    assert _blocks_status(r) == (14, True)


def test_full_blocks_stay_full_when_rounding_would_cut_the_last_one():
    # 14 full blocks of 512 at 0.3: round(7168 * 0.3) = 2150 but 14 blocks of 154 are 2156.
    (r,) = scale_lengths([_request(7168, tuple(range(14)))], 0.3).requests
    assert (r.block_tokens, r.input_tokens) == (154, 2156)
    assert _blocks_status(r) == (14, False)


def test_unshared_tokens_past_the_hash_blocks_scale_too():
    (r,) = scale_lengths([_request(2000, (1, 2))], 0.5).requests  # 1024 hashed + 976 unshared
    assert (r.block_tokens, r.input_tokens, r.hash_ids) == (256, 1000, (1, 2))


def test_surplus_hash_ids_are_dropped():
    (r,) = scale_lengths([_request(600, (1, 2, 3, 4))], 1.0).requests
    assert r.hash_ids == (1, 2)


def test_every_scaled_excerpt_request_keeps_its_block_structure():
    requests = _mooncake().requests
    for scale in (1 / 16, 0.1, 0.3, 0.77, 2.0):
        scaled = scale_lengths(requests, scale).requests
        for before, after in zip(requests, scaled, strict=True):
            used, partial = _blocks_status(before)
            assert _blocks_status(after) == (used, partial and after.block_tokens > 1)
            assert abs(after.input_tokens - before.input_tokens * scale) <= used + 1
            assert after.output_tokens == max(1, round(before.output_tokens * scale))


def test_clamps_cut_lengths_drop_hash_blocks_and_are_counted():
    requests = [_request(6758, tuple(range(14))), _request(900, (0, 99)), _request(100, (5,))]
    scaled = scale_lengths(requests, 1.0, max_input_tokens=1000, max_output_tokens=300)
    first, second, third = scaled.requests
    assert (first.input_tokens, first.hash_ids) == (1000, (0, 1))  # 512 + 488 of block 1
    assert (second.input_tokens, second.hash_ids) == (900, (0, 99))
    assert third.hash_ids == (5,)
    assert (scaled.input_clamped, scaled.output_clamped) == (1, 3)
    assert all(r.output_tokens == 300 for r in scaled.requests)


def test_lengths_never_drop_below_one_token():
    tiny = TraceRequest(index=0, timestamp_seconds=0, input_tokens=3, output_tokens=1)
    (r,) = scale_lengths([tiny], 0.01).requests
    assert (r.input_tokens, r.output_tokens) == (1, 1)
    (r,) = scale_lengths([_request(30, (1,))], 0.001).requests
    assert (r.input_tokens, r.block_tokens, r.hash_ids) == (1, 1, (1,))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length_scale": 0}, "length_scale: must be a finite number > 0"),
        ({"length_scale": math.nan}, "length_scale: must be a finite number > 0"),
        ({"length_scale": 1, "max_input_tokens": 0}, "max_input_tokens: must be an integer >= 1"),
        ({"length_scale": 1, "max_output_tokens": 2.5}, "max_output_tokens: must be an integer"),
        ({"length_scale": 1, "max_output_tokens": True}, "max_output_tokens: must be an integer"),
    ],
)
def test_bad_scaling_parameters_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        scale_lengths([_request(10, (1,))], **kwargs)


def _bailian(tmp_path: Path) -> Trace:
    lines = [
        {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5,
         "output_length": 1, "turn": 1},
        {"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 5,
         "output_length": 1, "turn": 1},
        {"chat_id": 3, "parent_chat_id": 1, "timestamp": 2, "input_length": 9,
         "output_length": 1, "turn": 2},
        {"chat_id": 4, "parent_chat_id": 3, "timestamp": 3, "input_length": 9,
         "output_length": 1, "turn": 3},
        {"chat_id": 5, "parent_chat_id": 1, "timestamp": 3, "input_length": 9,
         "output_length": 1, "turn": 2},
    ]  # fmt: skip
    path = tmp_path / "bailian.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return read_trace(path)


def test_bailian_conversations_are_grouped_in_turn_order(tmp_path):
    groups = session_groups(_bailian(tmp_path).requests)
    assert [g.session for g in groups] == ["1", "2"]
    assert [r.chat_id for r in groups[0].requests] == ["1", "3", "5", "4"]  # 2 branches at turn 1
    assert [r.turn for r in groups[0].requests] == [0, 1, 1, 2]
    assert groups[0].first_timestamp_seconds == 0.0


def test_requests_without_a_session_are_conversations_of_their_own():
    requests = [
        TraceRequest(index=0, timestamp_seconds=0, input_tokens=1, output_tokens=1, session="a"),
        TraceRequest(index=1, timestamp_seconds=1, input_tokens=1, output_tokens=1),
        TraceRequest(index=2, timestamp_seconds=2, input_tokens=1, output_tokens=1, session="a"),
        TraceRequest(index=3, timestamp_seconds=3, input_tokens=1, output_tokens=1),
    ]
    groups = session_groups(requests)
    assert [(g.session, [r.index for r in g.requests]) for g in groups] == [
        ("a", [0, 2]),
        (None, [1]),
        (None, [3]),
    ]


def test_a_window_of_a_session_trace_groups_what_it_holds(tmp_path):
    window = select_window(_bailian(tmp_path), 1, 10)
    groups = session_groups(window.requests)
    assert [(g.session, [r.chat_id for r in g.requests]) for g in groups] == [
        ("2", ["2"]),
        ("1", ["3", "5", "4"]),
    ]


def test_packaged_traces_are_found_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, file in PACKAGED_TRACES.items():
        assert packaged_trace_path(name).is_file()
        assert packaged_trace_path(file) == packaged_trace_path(name)
    with pytest.raises(ConfigError, match="no packaged trace 'sharegpt'"):
        packaged_trace_path("sharegpt")
