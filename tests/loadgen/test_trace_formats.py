"""Trace readers: each published layout read into the same TraceRequest shape, the format
detected from the first line, and every bad line refused with FILE:LINE: FIELD before anything
is returned (docs/traces.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lg_support import REPO

from loadgen.errors import ConfigError
from loadgen.traces import FORMATS, packaged_trace_path, read_trace

DATA = REPO / "loadgen" / "data"


def _write(tmp_path: Path, name: str, lines: list[str] | str) -> Path:
    path = tmp_path / name
    text = lines if isinstance(lines, str) else "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(tmp_path: Path, name: str, objects: list[dict]) -> Path:
    return _write(tmp_path, name, [json.dumps(o) for o in objects])


MOONCAKE = [
    {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 1000, "input_length": 1024, "output_length": 9, "hash_ids": [0, 2]},
    {"timestamp": 4500, "input_length": 30, "output_length": 1, "hash_ids": [3]},
]
BAILIAN = [
    {"chat_id": 10, "parent_chat_id": -1, "timestamp": 61.5, "input_length": 40,
     "output_length": 7, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
    {"chat_id": 11, "parent_chat_id": 999, "timestamp": 62.0, "input_length": 20,
     "output_length": 3, "type": "text", "turn": 4, "hash_ids": [7, 8]},
    {"chat_id": 12, "parent_chat_id": 10, "timestamp": 63.25, "input_length": 60,
     "output_length": 4, "type": "search", "turn": 2, "hash_ids": [1, 2, 3, 4]},
    {"chat_id": 13, "parent_chat_id": 12, "timestamp": 70.0, "input_length": 90,
     "output_length": 2, "type": "text", "turn": 3, "hash_ids": [1, 2, 3, 4, 5, 6]},
]  # fmt: skip
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def test_mooncake_lines_become_requests_in_seconds_with_512_token_blocks(tmp_path):
    trace = read_trace(_jsonl(tmp_path, "m.jsonl", MOONCAKE))
    assert trace.format == "mooncake" and trace.skipped_empty == 0
    first, second, third = trace.requests
    assert [r.timestamp_seconds for r in trace.requests] == [0.0, 0.0, 3.5]
    assert (first.index, first.input_tokens, first.output_tokens) == (0, 700, 5)
    assert second.hash_ids == (0, 2) and second.block_tokens == 512
    assert third.index == 2 and third.session is None and third.turn is None
    assert trace.span_seconds == 3.5


def test_azure_wall_clock_keeps_its_100_ns_digits(tmp_path):
    path = _write(
        tmp_path,
        "a.csv",
        [
            AZURE_HEADER,
            "2023-11-16 23:59:59.9999999,374,44",
            "2023-11-17 00:00:00.0000000,396,109",
            "2023-11-17 00:00:00.0000001,10,1",
            "2023-11-17 01:00:00,10,2",
        ],
    )
    trace = read_trace(path)
    assert trace.format == "azure"
    stamps = [r.timestamp_seconds for r in trace.requests]
    assert stamps == [0.0, 1e-7, 2e-7, 3600.0000001]
    assert [r.index for r in trace.requests] == [0, 1, 2, 3]  # data rows, header excluded
    assert trace.requests[1].input_tokens == 396 and trace.requests[1].hash_ids == ()


def test_the_shipped_excerpts_read_as_their_formats():
    mooncake = read_trace(packaged_trace_path("mooncake_conversation_excerpt"))
    assert mooncake.format == "mooncake" and len(mooncake.requests) == 918
    assert mooncake.span_seconds == 297.0
    text = (DATA / "mooncake_conversation_excerpt.jsonl").read_text(encoding="utf-8")
    first = json.loads(text.split("\n", 1)[0])
    assert mooncake.requests[0].hash_ids == tuple(first["hash_ids"])
    assert all(r.index == i for i, r in enumerate(mooncake.requests))
    azure = read_trace(packaged_trace_path("azure_conv_2023_excerpt.csv"))
    assert azure.format == "azure" and len(azure.requests) == 300
    # 18:15:50.9951690 - 18:15:46.6805900, to the 100 ns digit
    assert azure.requests[1].timestamp_seconds == pytest.approx(4.314579, abs=1e-9)


def test_burstgpt_skips_failed_rows_with_a_count_and_keeps_row_indexes(tmp_path):
    path = _write(
        tmp_path,
        "b.csv",
        [
            BURSTGPT_HEADER,
            "5,ChatGPT,472,18,490,Conversation log",
            "45,ChatGPT,1087,0,1087,Conversation log",
            "118.5,GPT-4,417,217,634,API log",
        ],
    )
    trace = read_trace(path)
    assert trace.format == "burstgpt" and trace.skipped_empty == 1
    assert [(r.index, r.timestamp_seconds) for r in trace.requests] == [(0, 0.0), (2, 113.5)]
    assert trace.requests[1].output_tokens == 217


def test_bailian_turns_are_chained_to_their_root_chat(tmp_path):
    trace = read_trace(_jsonl(tmp_path, "bailian.jsonl", BAILIAN))
    assert trace.format == "bailian"
    root, orphan, second, third = trace.requests
    assert (root.session, root.parent, root.turn, root.chat_id) == ("10", None, 0, "10")
    assert root.block_tokens == 16 and root.timestamp_seconds == 0.0
    assert (second.session, second.parent, second.turn) == ("10", "10", 1)
    assert (third.session, third.parent, third.turn) == ("10", "12", 2)
    # Its parent is not in the file: the conversation began before it, named by that parent.
    assert (orphan.session, orphan.parent, orphan.turn) == ("999", "999", 3)
    assert third.timestamp_seconds == pytest.approx(8.5)


def test_our_jsonl_schema_reads_sessions_blocks_and_seconds(tmp_path):
    path = _jsonl(
        tmp_path,
        "ours.jsonl",
        [
            {"timestamp": 2.5, "input_tokens": 100, "output_tokens": 20, "hash_ids": [4, 5],
             "block_tokens": 64, "session": "a", "turn": 0},
            {"timestamp": 3.0, "input_tokens": 9, "output_tokens": 1, "session": 7},
            {"timestamp": 3.0, "input_tokens": 9, "output_tokens": 1, "trace_index": 12},
        ],
    )  # fmt: skip
    trace = read_trace(path)
    assert trace.format == "jsonl"
    first, second, third = trace.requests
    assert (first.timestamp_seconds, first.block_tokens, first.session) == (0.0, 64, "a")
    assert (second.timestamp_seconds, second.session, second.hash_ids) == (0.5, "7", ())
    assert second.block_tokens is None and third.index == 2


def test_blank_lines_count_as_lines(tmp_path):
    path = _write(tmp_path, "m.jsonl", [json.dumps(MOONCAKE[0]), "", json.dumps(MOONCAKE[1])])
    assert [r.index for r in read_trace(path).requests] == [0, 2]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("m.jsonl", json.dumps(MOONCAKE[0]), "mooncake"),
        ("b.jsonl", json.dumps(BAILIAN[0]), "bailian"),
        ("o.jsonl", '{"timestamp": 0, "input_tokens": 1, "output_tokens": 1}', "jsonl"),
        ("a.csv", AZURE_HEADER + "\n2023-11-16 18:15:46.6805900,1,1", "azure"),
        ("g.csv", BURSTGPT_HEADER + "\n0,ChatGPT,1,1,2,API log", "burstgpt"),
        ("no_extension", json.dumps(MOONCAKE[0]), "mooncake"),
    ],
)
def test_auto_detects_the_format_from_the_first_line(tmp_path, name, content, expected):
    assert read_trace(_write(tmp_path, name, content + "\n")).format == expected


def test_auto_says_what_it_saw_when_it_cannot_tell(tmp_path):
    path = _write(tmp_path, "odd.jsonl", '{"ts": 0, "prompt": 3}\n')
    with pytest.raises(ConfigError, match=r"odd\.jsonl.*\.jsonl.*\['prompt', 'ts'\]"):
        read_trace(path)
    path = _write(tmp_path, "odd.csv", "time,in,out\n1,2,3\n")
    with pytest.raises(ConfigError, match=r"odd\.csv.*time,in,out.*TIMESTAMP"):
        read_trace(path)


def test_an_explicit_format_overrides_detection(tmp_path):
    path = _jsonl(tmp_path, "m.jsonl", MOONCAKE)
    with pytest.raises(ConfigError, match=r"m\.jsonl:1: input_length: unknown field"):
        read_trace(path, "jsonl")


def _line(obj: dict) -> str:
    return json.dumps(obj)


_GOOD = _line(MOONCAKE[0])
_OURS = '{"timestamp": 0, "input_tokens": 5, "output_tokens": 2}'

ERROR_CASES = {
    "bad json line": ("m.jsonl", [_GOOD, '{"timestamp": 1,', _GOOD], "auto", 2, "not valid JSON"),
    "not an object": ("m.jsonl", [_GOOD, "[1, 2]"], "mooncake", 2, "expected a JSON object"),
    "missing field": (
        "m.jsonl", [_GOOD, _GOOD, '{"timestamp": 5, "input_length": 3}'], "auto", 3,
        "output_length: missing",
    ),
    "wrong type": (
        "o.jsonl", [_OURS] * 16 + ['{"timestamp": 1, "input_tokens": 5, "output_tokens": "abc"}'],
        "auto", 17, 'output_tokens: must be an integer >= 1, got "abc"',
    ),
    "negative length": (
        "m.jsonl", [_GOOD, _line({**MOONCAKE[0], "input_length": -4})], "auto", 2,
        "input_length: must be an integer >= 0, got -4",
    ),
    "negative timestamp": (
        "m.jsonl", [_line({**MOONCAKE[0], "timestamp": -1})], "auto", 1,
        "timestamp: must be a number >= 0 (ms), got -1",
    ),
    "timestamp not a number": (
        "o.jsonl", ['{"timestamp": "soon", "input_tokens": 5, "output_tokens": 2}'], "jsonl", 1,
        'timestamp: must be a number >= 0 (seconds), got "soon"',
    ),
    "backwards timestamps": (
        "m.jsonl", [_line({**MOONCAKE[0], "timestamp": 9000}), _GOOD], "auto", 2,
        "timestamp: 1000.0 is earlier than the line before (9000.0)",
    ),
    "hash ids not ints": (
        "m.jsonl", [_line({**MOONCAKE[0], "hash_ids": [1, "x"]})], "auto", 1,
        "hash_ids: must be a list of integers",
    ),
    "our output zero": (
        "o.jsonl", ['{"timestamp": 0, "input_tokens": 5, "output_tokens": 0}'], "auto", 1,
        "output_tokens: must be an integer >= 1, got 0",
    ),
    "our unknown field": (
        "o.jsonl", ['{"timestamp": 0, "input_tokens": 5, "output_token": 2, "output_tokens": 1}'],
        "jsonl", 1, "output_token: unknown field",
    ),
    "our hash ids without block size": (
        "o.jsonl", ['{"timestamp": 0, "input_tokens": 5, "output_tokens": 2, "hash_ids": [1]}'],
        "auto", 1, "block_tokens: missing",
    ),
    "our session type": (
        "o.jsonl", ['{"timestamp": 0, "input_tokens": 5, "output_tokens": 2, "session": [1]}'],
        "auto", 1, "session: must be an integer or a non-empty string",
    ),
    "azure bad timestamp": (
        "a.csv", [AZURE_HEADER, "2023-11-16 18:15:46.1,1,1", "16/11/2023 18:15,1,1"], "auto", 3,
        "TIMESTAMP: must be like 2023-11-16 18:15:46.6805900",
    ),
    "azure backwards": (
        "a.csv", [AZURE_HEADER, "2023-11-16 18:15:46.2,1,1", "2023-11-16 18:15:46.1,1,1"],
        "auto", 3, "TIMESTAMP:",
    ),
    "azure non-integer count": (
        "a.csv", [AZURE_HEADER, "2023-11-16 18:15:46.2,1.5,1"], "auto", 2,
        'ContextTokens: must be an integer >= 0, got "1.5"',
    ),
    "csv missing column": (
        "b.csv", ["Timestamp,Model,Request tokens", "1,x,2"], "burstgpt", 1,
        "CSV header lacks column(s) Response tokens",
    ),
    "csv short row": (
        "b.csv", [BURSTGPT_HEADER, "1,ChatGPT,4,5,9,API log", "2,ChatGPT,4"], "auto", 3,
        "3 cells, the header has 6",
    ),
    "burstgpt negative time": (
        "b.csv", [BURSTGPT_HEADER, "-2,ChatGPT,4,5,9,API log"], "auto", 2,
        'Timestamp: must be a number >= 0 (seconds), got "-2"',
    ),
    "bailian missing chat id": (
        "b.jsonl", [_line({k: v for k, v in BAILIAN[0].items() if k != "chat_id"})], "bailian", 1,
        "chat_id: missing",
    ),
    "bailian turn zero": (
        "b.jsonl", [_line({**BAILIAN[0], "turn": 0})], "auto", 1,
        "turn: must be an integer >= 1, got 0",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_a_bad_line_names_the_file_line_and_field(tmp_path, case):
    name, lines, fmt, line, message = ERROR_CASES[case]
    path = _write(tmp_path, name, lines)
    with pytest.raises(ConfigError) as caught:
        read_trace(path, fmt)
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert message in str(caught.value)


def test_the_whole_file_is_validated_before_returning(tmp_path):
    lines = [_GOOD] * 500 + ['{"timestamp": 5000, "input_length": 3, "output_length": true}']
    message = r":501: output_length: must be an integer >= 0, got true"
    with pytest.raises(ConfigError, match=message):
        read_trace(_write(tmp_path, "m.jsonl", lines))


def test_unknown_format_lists_the_known_ones(tmp_path):
    path = _jsonl(tmp_path, "m.jsonl", MOONCAKE)
    with pytest.raises(ConfigError, match="format: unknown trace format 'sharegpt'") as caught:
        read_trace(path, "sharegpt")
    assert all(name in str(caught.value) for name in FORMATS)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("\n\n  \n", "is empty"),
        (AZURE_HEADER + "\n", "holds no requests"),
        (BURSTGPT_HEADER + "\n1,ChatGPT,4,0,4,API log\n", r"holds no requests \(1 rows"),
    ],
)
def test_an_empty_trace_is_refused(tmp_path, content, message):
    with pytest.raises(ConfigError, match=message):
        read_trace(_write(tmp_path, "t.csv", content))


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'nope.jsonl'} does not exist")):
        read_trace(tmp_path / "nope.jsonl")
