"""Production-traffic profiles: multi-turn chat sessions and trace replay, planned and run."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from lg_support import read_load, read_records, run_loadgen

from loadgen.conversations import ConversationFactory
from loadgen.errors import ConfigError
from loadgen.lengths import LengthDist
from loadgen.plan import build_plan
from loadgen.profiles import resolve
from loadgen.records import validate_load_json, validate_record


def _factory(**changes: object) -> ConversationFactory:
    kwargs: dict = dict(
        seed=0,
        stream=0,
        system_prompt_tokens=40,
        turns=LengthDist.from_value(3),
        user_tokens=LengthDist.from_value(10),
        output_tokens=LengthDist.from_value(5),
        priority="interactive",
    )
    kwargs.update(changes)
    return ConversationFactory(**kwargs)


def test_a_follow_up_turn_repeats_the_system_prompt_earlier_turns_and_answers_received() -> None:
    conversation = _factory().make("0-s0")
    first = conversation.request(0, index=0, offset_seconds=0.0)
    assert [role for role, _ in first.messages] == ["system", "user"]
    assert (first.stage, first.session, first.turn, first.max_tokens) == (
        "first_turn",
        "0-s0",
        0,
        5,
    )
    conversation.answered(0, "the answer")
    second = conversation.request(1, index=1, offset_seconds=1.0)
    assert second.messages[:2] == first.messages
    assert second.messages[2] == ("assistant", "the answer")
    assert (second.stage, second.turn) == ("follow_up", 1)
    assert second.prompt_tokens == first.prompt_tokens + len("the answer") + 10


def test_every_session_shares_one_system_prompt_and_conversations_are_seeded() -> None:
    factory = _factory()
    a, b = factory.make("s0"), factory.make("s1")
    assert a.system == b.system and len(a.system) == 40
    assert a.user_messages != b.user_messages  # the stream goes on: another conversation
    assert _factory().make("s0").user_messages == a.user_messages  # same seed, same first one


def test_chat_sessions_validates_its_parameters() -> None:
    with pytest.raises(ConfigError, match="closed loop"):
        resolve("chat_sessions", {"mode": "open"})
    with pytest.raises(ConfigError, match="sessions_total must be >= 1"):
        resolve("chat_sessions", {"sessions_total": 0})
    with pytest.raises(ConfigError, match="length kind"):
        resolve("chat_sessions", {"turns": {"kind": "zipf"}})
    assert resolve("chat_sessions", {}, "smoke").params["sessions_total"] == 20


def test_chat_sessions_run_sends_each_turn_with_its_history(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "1", "--itl-ms", "1")
    out = tmp_path / "sessions"
    result = run_loadgen(
        "--target", server.url, "--profile", "chat_sessions", "--out", str(out), "--scale", "full",
        "--set", "sessions_total=6", "--set", "concurrent_sessions=2",
        "--set", "think_time_seconds=0.01", "--set", "system_prompt_tokens=64",
        "--set", 'turns={"kind": "uniform", "low": 2, "high": 4}',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records, load = read_records(out), read_load(out)
    assert validate_load_json(load) == [] and all(validate_record(r) == [] for r in records)
    sessions: dict[str, list[dict]] = {}
    for record in records:
        sessions.setdefault(record["session"], []).append(record)
    assert len(sessions) == 6
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(len(turns))) and 2 <= len(turns) <= 4
        assert [r["stage"] for r in turns] == ["first_turn"] + ["follow_up"] * (len(turns) - 1)
        # Each turn is sent after the previous answer and carries it: its prompt grows.
        for earlier, later in itertools.pairwise(turns):
            assert later["sent_at"] >= earlier["done_at"]
            assert later["prompt_tokens"] > earlier["prompt_tokens"]


def _write_trace(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _jsonl_trace(tmp_path: Path) -> Path:
    return _write_trace(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 0.0, "input_tokens": 40, "output_tokens": 4, "hash_ids": [1, 2],
             "block_tokens": 16},
            {"timestamp": 0.5, "input_tokens": 36, "output_tokens": 6, "hash_ids": [1, 3],
             "block_tokens": 16},
            {"timestamp": 1.0, "input_tokens": 900, "output_tokens": 8},
        ],
    )  # fmt: skip


def test_trace_plan_sends_each_line_at_its_scaled_time_with_shared_prefixes(tmp_path) -> None:
    path = _jsonl_trace(tmp_path)
    spec = resolve("trace", {"path": str(path), "time_scale": 2.0, "tokenizer": "bytes"})
    plan = build_plan(spec)
    assert [p.offset_seconds for p in plan] == [0.0, 0.25, 0.5]
    assert [p.trace_index for p in plan] == [0, 1, 2]
    assert [p.max_tokens for p in plan] == [4, 6, 8] and all(p.exact_output for p in plan)
    texts = [p.messages[0][1] for p in plan]
    assert [len(t) for t in texts] == [40, 36, 900]  # bytes = tokens on the bundled server
    assert texts[0][:16] == texts[1][:16] and texts[0][16:32] != texts[1][16:32]
    # The relative form, once resolved: the window's mean output-token rate is the one asked.
    spec = resolve("trace", {"path": str(path), "time_scale": {"output_tokens_per_second": 36.0}})
    assert spec.replay is not None
    assert spec.replay.summary()["offered_output_tokens_per_second"] == pytest.approx(36.0)


def test_trace_clamps_to_the_context_and_counts_what_it_clamped(tmp_path) -> None:
    path = str(_jsonl_trace(tmp_path))
    spec = resolve("trace", {"path": path, "context_tokens": 512, "tokenizer": "bytes"})
    assert spec.replay is not None
    summary = spec.replay.summary()
    assert summary["input_clamped"] == 1 and summary["max_input_tokens"] == 512 - 8 - 32
    assert max(r.input_tokens + r.output_tokens for r in spec.replay.requests) <= 512
    # Unverified word units may take more than a token each: half the room.
    words = resolve("trace", {"path": path, "context_tokens": 512, "tokenizer": "words"})
    assert words.replay is not None
    assert words.replay.summary()["max_input_tokens"] == (512 - 8 - 32) // 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"format": "parquet"}, "format"),
        ({"start_seconds": 99.0}, "start_seconds"),
        ({"rate_rps": 3.0}, "set time_scale, not rate_rps"),
        ({"time_scale": "0.5x capacity"}, "needs the target's calibration"),
        ({"time_scale": 0}, "time_scale must be > 0"),
        ({"length_scale": -1.0}, "length_scale"),
        ({"max_input_tokens": 0}, "max_input_tokens"),
    ],
)
def test_bad_trace_parameters_are_config_errors(tmp_path, overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve("trace", {"path": str(_jsonl_trace(tmp_path)), **overrides})


def test_a_bad_trace_line_is_named_before_anything_runs(tmp_path) -> None:
    path = _write_trace(tmp_path / "bad.jsonl", [{"timestamp": 0, "input_tokens": 3}])
    result = run_loadgen(
        "--target", "http://127.0.0.1:9", "--profile", "trace", "--out", str(tmp_path / "o"),
        "--set", f"path={path}", "--set", "format=jsonl",
    )  # fmt: skip
    assert result.returncode == 2
    assert f"{path}:1" in result.stderr and "output_tokens" in result.stderr


def test_the_default_trace_is_the_packaged_excerpt_from_any_directory(tmp_path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        spec = resolve("trace", {}, "smoke")
    finally:
        os.chdir(cwd)
    assert spec.replay is not None and spec.replay.format == "mooncake"
    assert len(spec.replay.requests) > 20


def _replay(server, tmp_path: Path) -> Path:
    """The small jsonl trace replayed four times as fast against `server`; its output dir."""
    out = tmp_path / "trace"
    result = run_loadgen(
        "--target", server.url, "--profile", "trace", "--out", str(out),
        "--set", f"path={_jsonl_trace(tmp_path)}", "--set", "time_scale=4", "--scale", "full",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_trace_run_writes_the_window_and_records_each_line(fake_server, tmp_path) -> None:
    out = _replay(fake_server("--ttft-ms", "1", "--itl-ms", "1"), tmp_path)
    records, load = read_records(out), read_load(out)
    assert validate_load_json(load) == [] and all(validate_record(r) == [] for r in records)
    assert sorted(r["trace_index"] for r in records) == [0, 1, 2]
    # The fake server states no context: nothing is clamped by default, and that is reported.
    assert load["trace"]["requests"] == 3 and load["trace"]["input_clamped"] == 0
    assert load["params"]["tokenizer"] == "words"  # not the bundled server: approximate words
    window = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    assert [w["trace_index"] for w in window] == [0, 1, 2]
    assert window[1]["timestamp"] == 0.125 and window[0]["block_tokens"] == 16


def test_a_target_tokenize_endpoint_picks_the_words_it_counts_as_one_token(
    fake_server, tmp_path
) -> None:
    out = _replay(fake_server("--ttft-ms", "1", "--itl-ms", "1", "--tokenize"), tmp_path)
    params = read_load(out)["params"]
    assert params["tokenizer"] == "target"
    units = params["token_units"]
    assert units and all(len(u.strip()) <= 4 and u.startswith(" ") for u in units)
    assert " the" in units and " about" not in units


def test_a_bailian_turn_waits_for_its_parent_answer(fake_server, tmp_path) -> None:
    server = fake_server("--ttft-ms", "30", "--itl-ms", "5")
    path = _write_trace(
        tmp_path / "bailian.jsonl",
        [
            {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 20,
             "output_length": 4, "type": "text", "turn": 1, "hash_ids": [7]},
            {"chat_id": 2, "parent_chat_id": 1, "timestamp": 0.0, "input_length": 40,
             "output_length": 4, "type": "text", "turn": 2, "hash_ids": [7, 8]},
        ],
    )  # fmt: skip
    out = tmp_path / "bailian"
    result = run_loadgen(
        "--target", server.url, "--profile", "trace", "--out", str(out),
        "--set", f"path={path}", "--set", "format=bailian", "--scale", "full",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, second = sorted(read_records(out), key=lambda r: r["turn"])
    assert first["session"] == second["session"] == "1"
    assert second["sent_at"] >= first["done_at"]
    # The wait for the parent is the conversation's, not client lag.
    assert second["sent_at"] - second["planned_at"] < 0.05


def test_a_burst_at_one_timestamp_is_sent_whole_and_never_before_its_time(
    fake_server, tmp_path
) -> None:
    # Prepared ahead of their instant (loadgen/release.py), the requests still go at it.
    lines = [
        {"timestamp": t, "input_tokens": 20, "output_tokens": 2}
        for t in (0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.6, 0.6, 0.6, 0.6)
    ]
    path = _write_trace(tmp_path / "burst.jsonl", lines)
    out = tmp_path / "burst"
    result = run_loadgen(
        "--target", fake_server("--ttft-ms", "1", "--itl-ms", "1").url, "--profile", "trace",
        "--out", str(out), "--set", f"path={path}", "--scale", "full",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = read_records(out)
    assert sorted(r["trace_index"] for r in records) == list(range(12))
    assert all(r["status"] == "ok" and r["sent_at"] >= r["planned_at"] for r in records)
    assert {round(r["planned_at"] - records[0]["planned_at"], 6) for r in records} <= {
        0.0, 0.4, -0.4
    }  # fmt: skip
    assert read_load(out)["sent_requests"] == 12
