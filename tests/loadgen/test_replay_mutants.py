"""The trace profile's replay (loadgen.replay) in-process: window, length scaling and clamping to
the target's context, the time scale (a factor or an output-token rate), the load.json summary,
the replayed trace's lines, and the errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.errors import ConfigError
from loadgen.replay import (
    DEFAULT_TRACE,
    TEMPLATE_MARGIN_TOKENS,
    build_replay,
    window_line,
)
from loadgen.traces import TraceRequest, packaged_trace_path


def _trace(tmp_path: Path, rows: list[dict[str, Any]]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


_ROWS = [
    {"timestamp": 0.0, "input_tokens": 100, "output_tokens": 10},
    {"timestamp": 1.0, "input_tokens": 300, "output_tokens": 50},
    {"timestamp": 2.0, "input_tokens": 40, "output_tokens": 400},
    {"timestamp": 4.0, "input_tokens": 80, "output_tokens": 20},
]


def _params(path: str | None, **kw: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "path": path, "format": "jsonl", "start_seconds": 0.0, "duration_seconds": None,
        "time_scale": 1.0, "length_scale": 1.0, "max_input_tokens": None,
        "max_output_tokens": None, "context_tokens": None, "tokenizer": "bytes",
    }  # fmt: skip
    params.update(kw)
    return params


def test_the_whole_window_unscaled(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    replay = build_replay(_params(path), default_window_seconds=100.0)
    assert [(r.timestamp_seconds, r.input_tokens, r.output_tokens) for r in replay.requests] == [
        (0.0, 100, 10), (1.0, 300, 50), (2.0, 40, 400), (4.0, 80, 20),
    ]  # fmt: skip
    assert replay.path == path and replay.format == "jsonl"
    assert replay.duration_seconds == 4.0 and replay.time_scale == 1.0
    assert (replay.input_clamped, replay.output_clamped) == (0, 0)
    assert replay.max_input_tokens is None and replay.max_output_tokens is None
    assert replay.summary() == {
        "path": path, "format": "jsonl", "requests": 4, "time_scale": 1.0,
        "duration_seconds": 4.0, "offered_output_tokens_per_second": 480 / 4.0,
        "max_input_tokens": None, "max_output_tokens": None, "input_clamped": 0,
        "output_clamped": 0,
    }  # fmt: skip


def test_the_default_window_and_an_explicit_one(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    short = build_replay(_params(path), default_window_seconds=1.5)
    assert len(short.requests) == 2 and short.duration_seconds == 1.5
    explicit = build_replay(
        _params(path, start_seconds=1.0, duration_seconds=2.0), default_window_seconds=100.0
    )
    assert [r.timestamp_seconds for r in explicit.requests] == [0.0, 1.0]
    assert [r.input_tokens for r in explicit.requests] == [300, 40]


def test_time_scale_factor_and_rate(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    fast = build_replay(_params(path, time_scale=2), default_window_seconds=100.0)
    assert fast.time_scale == 2.0 and isinstance(fast.time_scale, float)
    assert fast.duration_seconds == 2.0
    assert [r.timestamp_seconds for r in fast.requests] == [0.0, 0.5, 1.0, 2.0]
    # 480 output tokens over 4 s = 120/s; 240/s asks for twice as fast.
    rated = build_replay(
        _params(path, time_scale={"output_tokens_per_second": 240}), default_window_seconds=100.0
    )
    assert rated.time_scale == pytest.approx(2.0)
    assert rated.summary()["offered_output_tokens_per_second"] == pytest.approx(240.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"output_tokens_per_second": 0}, "time_scale must be a number or"),
        ({"output_tokens_per_second": -1.0}, "time_scale must be a number or"),
        ({"output_tokens_per_second": float("inf")}, "time_scale must be a number or"),
        ({"output_tokens_per_second": float("nan")}, "time_scale must be a number or"),
        ({"output_tokens_per_second": True}, "time_scale must be a number or"),
        ({"output_tokens_per_second": "5"}, "time_scale must be a number or"),
        ({"output_tokens_per_second": 5, "x": 1}, "time_scale must be a number or"),
        ({}, "time_scale must be a number or"),
        ("0.5x capacity", "needs the target's calibration"),
        (True, "time_scale must be a number, got True"),
        (None, "time_scale must be a number, got None"),
        (0, "time_scale must be > 0, got 0"),
        (-2.0, "time_scale must be > 0"),
        (float("inf"), "time_scale must be > 0"),
        (float("nan"), "time_scale must be > 0"),
    ],
)
def test_bad_time_scales_name_the_key(tmp_path: Path, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_replay(_params(_trace(tmp_path, _ROWS), time_scale=value), default_window_seconds=9)


def test_a_rate_time_scale_accepts_an_integer_and_a_float(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    for rate in (60, 60.0):
        replay = build_replay(_params(path, time_scale={"output_tokens_per_second": rate}),
                              default_window_seconds=100.0)  # fmt: skip
        assert replay.time_scale == pytest.approx(0.5)


def test_length_scale_and_explicit_clamps(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    replay = build_replay(
        _params(path, length_scale=0.5, max_input_tokens=60, max_output_tokens=100.0),
        default_window_seconds=100.0,
    )
    assert [(r.input_tokens, r.output_tokens) for r in replay.requests] == [
        (50, 5), (60, 25), (20, 100), (40, 10),
    ]  # fmt: skip
    assert (replay.input_clamped, replay.output_clamped) == (1, 1)
    assert replay.max_input_tokens == 60 and replay.max_output_tokens == 100
    assert isinstance(replay.max_output_tokens, int)


@pytest.mark.parametrize("key", ["max_input_tokens", "max_output_tokens", "context_tokens"])
@pytest.mark.parametrize("value", [0, -3, 1.5, True, "8", [8]])
def test_counts_must_be_whole_numbers_of_at_least_one(tmp_path, key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"^{key} must be an integer >= 1 or null, got "):
        build_replay(_params(_trace(tmp_path, _ROWS), **{key: value}), default_window_seconds=9)


def test_a_count_of_one_is_accepted(tmp_path: Path) -> None:
    replay = build_replay(_params(_trace(tmp_path, _ROWS), max_input_tokens=1,
                                  max_output_tokens=1), default_window_seconds=100.0)  # fmt: skip
    assert {(r.input_tokens, r.output_tokens) for r in replay.requests} == {(1, 1)}
    assert (replay.input_clamped, replay.output_clamped) == (4, 4)


def test_the_context_clamps_answers_to_half_and_prompts_to_what_is_left(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    # context 400: answers at most 200; prompts at most 400 - 200 - 32 = 168 (exact tokens).
    replay = build_replay(_params(path, context_tokens=400), default_window_seconds=100.0)
    assert replay.max_output_tokens == 200
    assert replay.max_input_tokens == 400 - 200 - TEMPLATE_MARGIN_TOKENS
    assert [(r.input_tokens, r.output_tokens) for r in replay.requests] == [
        (100, 10), (168, 50), (40, 200), (80, 20),
    ]  # fmt: skip
    assert (replay.input_clamped, replay.output_clamped) == (1, 1)
    assert max(r.input_tokens + r.output_tokens for r in replay.requests) <= 400


def test_the_context_room_follows_the_longest_answer_after_scaling(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    replay = build_replay(_params(path, context_tokens=1000, length_scale=0.5),
                          default_window_seconds=100.0)  # fmt: skip
    # answers scaled: 5, 25, 200, 10 (under half the context); room = 1000 - 200 - 32.
    assert replay.max_output_tokens == 500
    assert replay.max_input_tokens == 1000 - 200 - TEMPLATE_MARGIN_TOKENS


def test_with_a_smaller_max_the_context_keeps_the_smaller_limits(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    replay = build_replay(
        _params(path, context_tokens=400, max_output_tokens=30, max_input_tokens=90),
        default_window_seconds=100.0,
    )
    assert replay.max_output_tokens == 30 and replay.max_input_tokens == 90
    replay = build_replay(
        _params(path, context_tokens=400, max_output_tokens=300, max_input_tokens=9000),
        default_window_seconds=100.0,
    )
    assert replay.max_output_tokens == 200 and replay.max_input_tokens == 168


@pytest.mark.parametrize("tokenizer", ["words", "auto", None])
def test_approximate_tokenizers_keep_prompts_to_half_the_room(tmp_path, tokenizer) -> None:
    path = _trace(tmp_path, _ROWS)
    replay = build_replay(_params(path, context_tokens=400, tokenizer=tokenizer),
                          default_window_seconds=100.0)  # fmt: skip
    assert replay.max_input_tokens == (400 - 200 - TEMPLATE_MARGIN_TOKENS) // 2


def test_a_context_with_no_room_for_a_prompt_is_refused(tmp_path: Path) -> None:
    path = _trace(tmp_path, _ROWS)
    # context 65: answers up to 32, room 65 - 32 - 32 = 1: still a prompt of one token.
    replay = build_replay(_params(path, context_tokens=65), default_window_seconds=100.0)
    assert replay.max_input_tokens == 1 and replay.max_output_tokens == 32
    with pytest.raises(
        ConfigError,
        match=r"^context_tokens 64 leaves no room for a prompt "
        r"beside answers of up to 32 tokens: lower max_output_tokens$",
    ):
        build_replay(_params(path, context_tokens=64), default_window_seconds=100.0)
    with pytest.raises(
        ConfigError,
        match="context_tokens 1 leaves no room for a prompt beside answers of up to 1 tokens",
    ):
        build_replay(_params(path, context_tokens=1), default_window_seconds=100.0)


@pytest.mark.parametrize("path", ["", 7, ["a"]])
def test_a_bad_path_is_named(path: Any) -> None:
    with pytest.raises(ConfigError, match=r"^path must be a trace file's path, got "):
        build_replay(_params(path), default_window_seconds=9)


def test_no_path_replays_the_packaged_trace() -> None:
    replay = build_replay(_params(None, format="auto"), default_window_seconds=30.0)
    assert replay.path == str(packaged_trace_path(DEFAULT_TRACE))
    assert replay.format == "mooncake" and replay.requests
    assert DEFAULT_TRACE == "mooncake_conversation_excerpt.jsonl"


def test_window_lines_round_timestamps_and_carry_what_is_set() -> None:
    plain = TraceRequest(index=3, timestamp_seconds=1.23456789, input_tokens=5, output_tokens=6)
    assert window_line(plain) == {
        "timestamp": 1.234568, "input_tokens": 5, "output_tokens": 6, "hash_ids": [],
        "trace_index": 3,
    }  # fmt: skip
    full = TraceRequest(index=0, timestamp_seconds=2.0, input_tokens=9, output_tokens=1,
                        hash_ids=(4, 5), block_tokens=8, session="s1")  # fmt: skip
    line = window_line(full)
    assert line == {"timestamp": 2.0, "input_tokens": 9, "output_tokens": 1, "hash_ids": [4, 5],
                    "block_tokens": 8, "session": "s1", "trace_index": 0}  # fmt: skip
    assert list(line) == ["timestamp", "input_tokens", "output_tokens", "hash_ids",
                          "block_tokens", "session", "trace_index"]  # fmt: skip


def test_a_rate_below_one_token_per_second_is_a_rate() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = _trace(Path(tmp), _ROWS)
        replay = build_replay(_params(path, time_scale={"output_tokens_per_second": 0.5}),
                              default_window_seconds=100.0)  # fmt: skip
    assert replay.time_scale == pytest.approx(0.5 / 120.0)


def test_the_format_asked_for_is_the_one_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_replay(_params(_trace(tmp_path, _ROWS), format="azure"), default_window_seconds=9)
