"""loadgen.traces.formats in detail: every request field each reader fills in, the exact text of
each refusal (file, line, field), what `auto` sees, and the edges of reading a file (a BOM, bytes
that are not UTF-8, a directory, U+2028 inside a JSON string, blank CSV rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import ConfigError
from loadgen.traces import TraceRequest, detect_format, read_trace
from loadgen.traces.formats import BAILIAN_BLOCK_TOKENS, FORMATS, MOONCAKE_BLOCK_TOKENS

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _objects(tmp_path: Path, name: str, objects: list[dict]) -> Path:
    return _write(tmp_path, name, [json.dumps(o) for o in objects])


def _refusal(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(ConfigError) as caught:
        read_trace(path, fmt)
    return str(caught.value)


def test_the_formats_and_block_sizes() -> None:
    assert FORMATS == ("auto", "mooncake", "azure", "burstgpt", "bailian", "jsonl")
    assert (MOONCAKE_BLOCK_TOKENS, BAILIAN_BLOCK_TOKENS) == (512, 16)


def test_mooncake_requests_field_by_field(tmp_path) -> None:
    path = _objects(
        tmp_path,
        "m.jsonl",
        [
            {"timestamp": 2000, "input_length": 700, "output_length": 5, "hash_ids": [4, 5]},
            {"timestamp": 2500, "input_length": 30, "output_length": 0, "hash_ids": [3]},
            {"timestamp": 3250, "input_length": 30, "output_length": 2},
        ],
    )
    trace = read_trace(path)
    assert (trace.path, trace.format, trace.skipped_empty) == (str(path), "mooncake", 1)
    assert trace.requests == (
        TraceRequest(index=0, timestamp_seconds=0.0, input_tokens=700, output_tokens=5,
                     hash_ids=(4, 5), block_tokens=512),
        TraceRequest(index=2, timestamp_seconds=1.25, input_tokens=30, output_tokens=2),
    )  # fmt: skip


def test_azure_requests_field_by_field(tmp_path) -> None:
    path = _write(
        tmp_path,
        "a.csv",
        [
            " TIMESTAMP , ContextTokens,GeneratedTokens,Extra",
            "2023-11-16 18:15:46.5,10,0,x",
            "2023-11-16 18:15:47.0,0,3,x",
            "2023-11-16 18:15:48.25,\t12 ,4,x",
        ],
    )
    trace = read_trace(path)
    assert (trace.format, trace.skipped_empty) == ("azure", 2)
    assert trace.requests == (
        TraceRequest(index=2, timestamp_seconds=0.0, input_tokens=12, output_tokens=4),
    )


def test_azure_keeps_the_nanoseconds_between_rows(tmp_path) -> None:
    path = _write(
        tmp_path,
        "a.csv",
        [AZURE_HEADER, "2023-11-16 18:15:46.0000000,1,1", "2023-11-16 18:15:48.0000003,1,1"],
    )
    assert [r.timestamp_seconds for r in read_trace(path).requests] == [0.0, 2.0000003]


def test_burstgpt_requests_field_by_field(tmp_path) -> None:
    path = _write(
        tmp_path,
        "g.csv",
        [BURSTGPT_HEADER, "1.5,ChatGPT,0,18,18,API log", "4,ChatGPT,7,3,10,API log"],
    )
    trace = read_trace(path)
    assert (trace.format, trace.skipped_empty) == ("burstgpt", 1)
    assert trace.requests == (
        TraceRequest(index=1, timestamp_seconds=0.0, input_tokens=7, output_tokens=3),
    )


def test_bailian_requests_field_by_field(tmp_path) -> None:
    path = _objects(
        tmp_path,
        "b.jsonl",
        [
            {"chat_id": "r", "parent_chat_id": "-1", "timestamp": 10, "input_length": 5,
             "output_length": 0, "turn": 1, "hash_ids": [1]},
            {"chat_id": "s", "parent_chat_id": "r", "timestamp": 11, "input_length": 6,
             "output_length": 2, "turn": 2, "hash_ids": [1, 2]},
            {"chat_id": "t", "parent_chat_id": "s", "timestamp": 12.5, "input_length": 7,
             "output_length": 1},
            {"chat_id": 9, "timestamp": 13, "input_length": 8, "output_length": 1},
        ],
    )  # fmt: skip
    trace = read_trace(path)
    assert (trace.format, trace.skipped_empty) == ("bailian", 1)
    # The skipped first turn still names the conversation of the turns that follow it (times
    # count from the first request kept).
    assert trace.requests == (
        TraceRequest(index=1, timestamp_seconds=0.0, input_tokens=6, output_tokens=2,
                     hash_ids=(1, 2), block_tokens=16, session="r", chat_id="s", parent="r",
                     turn=1),
        TraceRequest(index=2, timestamp_seconds=1.5, input_tokens=7, output_tokens=1,
                     session="r", chat_id="t", parent="s", turn=None),
        TraceRequest(index=3, timestamp_seconds=2.0, input_tokens=8, output_tokens=1,
                     session="9", chat_id="9", parent=None),
    )  # fmt: skip


def test_bailian_a_parent_outside_the_file_names_the_conversation(tmp_path) -> None:
    path = _objects(
        tmp_path,
        "b.jsonl",
        [
            {"chat_id": 5, "parent_chat_id": 4, "timestamp": 0, "input_length": 5,
             "output_length": 1},
            {"chat_id": 6, "parent_chat_id": 5, "timestamp": 1, "input_length": 5,
             "output_length": 1},
        ],
    )  # fmt: skip
    assert [(r.session, r.parent) for r in read_trace(path).requests] == [("4", "4"), ("4", "5")]


def test_bailian_refusals(tmp_path) -> None:
    base = {"chat_id": 1, "timestamp": 0, "input_length": 5, "output_length": 1}
    cases = [
        (
            {**base, "parent_chat_id": 1.5},
            "parent_chat_id: must be an integer or a non-empty string, got 1.5",
        ),
        ({**base, "chat_id": ""}, 'chat_id: must be an integer or a non-empty string, got ""'),
        ({**base, "timestamp": -1}, "timestamp: must be a number >= 0 (seconds), got -1"),
        ({k: v for k, v in base.items() if k != "timestamp"}, "timestamp: missing"),
        ({**base, "turn": "x"}, 'turn: must be an integer >= 1, got "x"'),
        ({**base, "hash_ids": 3}, "hash_ids: must be a list of integers, got 3"),
        ({**base, "input_length": -1}, "input_length: must be an integer >= 0, got -1"),
    ]
    for obj, message in cases:
        path = _objects(tmp_path, "b.jsonl", [obj])
        assert _refusal(path, "bailian") == f"{path}:1: {message}"


def test_our_jsonl_field_by_field(tmp_path) -> None:
    path = _objects(
        tmp_path,
        "o.jsonl",
        [
            {"timestamp": 1, "input_tokens": 5, "output_tokens": 1, "block_tokens": 4},
            {"timestamp": 1.5, "input_tokens": 6, "output_tokens": 2, "hash_ids": [7],
             "block_tokens": 3, "session": "s", "turn": 0, "trace_index": 0},
        ],
    )  # fmt: skip
    trace = read_trace(path)
    assert (trace.format, trace.skipped_empty) == ("jsonl", 0)
    assert trace.requests == (
        TraceRequest(index=0, timestamp_seconds=0.0, input_tokens=5, output_tokens=1),
        TraceRequest(index=1, timestamp_seconds=0.5, input_tokens=6, output_tokens=2,
                     hash_ids=(7,), block_tokens=3, session="s", turn=0),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"block_tokens": 0}, "block_tokens: must be an integer >= 1, got 0"),
        ({"hash_ids": [1], "block_tokens": 0}, "block_tokens: must be an integer >= 1, got 0"),
        ({"turn": -1}, "turn: must be an integer >= 0, got -1"),
        ({"trace_index": -1}, "trace_index: must be an integer >= 0, got -1"),
        ({"session": ""}, 'session: must be an integer or a non-empty string, got ""'),
        ({"input_tokens": 0}, "input_tokens: must be an integer >= 1, got 0"),
        ({"hash_ids": [True]}, "hash_ids: must be a list of integers, got [true]"),
        (
            {"zz": 1, "aa": 2},
            "aa: unknown field (known: timestamp, input_tokens, output_tokens, hash_ids, "
            "block_tokens, session, turn, trace_index)",
        ),
    ],
)
def test_our_jsonl_refusals(tmp_path, extra, message) -> None:
    path = _objects(
        tmp_path, "o.jsonl", [{"timestamp": 0, "input_tokens": 5, "output_tokens": 1, **extra}]
    )
    assert _refusal(path, "jsonl") == f"{path}:1: {message}"


@pytest.mark.parametrize("field", ["timestamp", "input_tokens", "output_tokens"])
def test_our_jsonl_required_fields(tmp_path, field) -> None:
    obj = {"timestamp": 0, "input_tokens": 5, "output_tokens": 1}
    del obj[field]
    path = _objects(tmp_path, "o.jsonl", [obj])
    assert _refusal(path, "jsonl") == f"{path}:1: {field}: missing"


@pytest.mark.parametrize("field", ["timestamp", "input_length", "output_length"])
def test_mooncake_required_fields(tmp_path, field) -> None:
    obj = {"timestamp": 0, "input_length": 5, "output_length": 1}
    del obj[field]
    path = _objects(tmp_path, "m.jsonl", [obj])
    assert _refusal(path, "mooncake") == f"{path}:1: {field}: missing"


def test_backwards_timestamps_quote_both_values(tmp_path) -> None:
    good = {"timestamp": 2.5, "input_tokens": 5, "output_tokens": 1}
    path = _objects(tmp_path, "o.jsonl", [good, good, {**good, "timestamp": 2}])
    assert _refusal(path) == (
        f"{path}:3: timestamp: 2.0 is earlier than the line before (2.5): the trace must be "
        "sorted by time (sort the file by this column first)"
    )
    path = _write(
        tmp_path,
        "a.csv",
        [AZURE_HEADER, "2023-11-16 18:15:46.2,1,1", "2023-11-16 18:15:46.1,1,1"],
    )
    assert _refusal(path).startswith(f"{path}:3: TIMESTAMP: ")
    path = _write(tmp_path, "g.csv", [BURSTGPT_HEADER, "5,x,1,1,2,l", "4,x,1,1,2,l"])
    assert _refusal(path).startswith(f"{path}:3: Timestamp: 4.0 is earlier than the line before")


def test_json_line_refusals(tmp_path) -> None:
    good = json.dumps({"timestamp": 0, "input_tokens": 5, "output_tokens": 1})
    path = _write(tmp_path, "o.jsonl", [good, "[1]"])
    assert _refusal(path) == f"{path}:2: expected a JSON object, got list"
    path = _write(tmp_path, "o.jsonl", [good, '"text"'])
    assert _refusal(path) == f"{path}:2: expected a JSON object, got str"
    path = _write(tmp_path, "o.jsonl", [good, "{nope"])
    message = _refusal(path)
    assert message.startswith(f"{path}:2: not valid JSON (") and message.endswith(")")
    assert "Traceback" not in message and "JSONDecodeError" not in message


def test_a_line_separator_inside_a_json_string_is_not_a_line_break(tmp_path) -> None:
    path = tmp_path / "o.jsonl"
    line = '{"timestamp": 0, "input_tokens": 5, "output_tokens": 1, "session": "a\u2028b"}'
    path.write_text(line + "\n", encoding="utf-8")
    assert read_trace(path, "jsonl").requests[0].session == "a\u2028b"
    # Told apart on its own too: the format's detection splits lines the way the readers do.
    assert read_trace(path, "auto").requests[0].session == "a\u2028b"
    assert detect_format(str(path), path.read_text(encoding="utf-8")) == "jsonl"


def test_undetectable_json_is_named_at_its_own_line(tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n\n{not json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:3: not valid JSON, cannot tell"):
        detect_format(str(path), path.read_text(encoding="utf-8"))


def test_csv_refusals_and_blank_rows(tmp_path) -> None:
    path = _write(tmp_path, "a.csv", ["TIMESTAMP,Model", "2023-11-16 18:15:46,x"])
    assert _refusal(path, "azure") == (
        f"{path}:1: CSV header lacks column(s) ContextTokens, GeneratedTokens, "
        "got ['TIMESTAMP', 'Model']"
    )
    path = _write(tmp_path, "a.csv", [AZURE_HEADER, "2023-11-16 18:15:46,1,1,9"])
    assert _refusal(path) == f"{path}:2: 4 cells, the header has 3"
    path = _write(tmp_path, "a.csv", [AZURE_HEADER, " , , ", "", "2023-11-16 18:15:46,1,2"])
    trace = read_trace(path)
    assert [(r.index, r.output_tokens) for r in trace.requests] == [(2, 2)]
    path = _write(tmp_path, "a.csv", [AZURE_HEADER, "yesterday,1,1"])
    assert _refusal(path) == (
        f'{path}:2: TIMESTAMP: must be like 2023-11-16 18:15:46.6805900, got "yesterday"'
    )


def test_an_empty_csv_has_no_header(tmp_path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("", encoding="utf-8")
    assert _refusal(path, "azure") == (
        f"{path}:1: CSV header lacks column(s) TIMESTAMP, ContextTokens, GeneratedTokens, got []"
    )


def test_reading_the_file(tmp_path) -> None:
    good = '{"timestamp": 0, "input_tokens": 5, "output_tokens": 1}\n'
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good.encode())
    assert read_trace(path).format == "jsonl"
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"timestamp": 0, "input_tokens": 5, "session": "\xe9"}\n')
    assert _refusal(path).startswith(f"cannot read trace file {path}: 'utf-8' codec")
    assert _refusal(tmp_path).startswith(f"cannot read trace file {tmp_path}: ")
    assert _refusal(tmp_path / "nope.csv") == f"trace file {tmp_path / 'nope.csv'} does not exist"
    path = tmp_path / "none.jsonl"
    path.write_text("\n", encoding="utf-8")
    assert _refusal(path, "jsonl") == f"trace file {path} holds no requests"
    path = _write(tmp_path, "g.csv", [BURSTGPT_HEADER, "1,x,4,0,4,l", "2,x,0,3,3,l"])
    assert _refusal(path) == (
        f"trace file {path} holds no requests (2 rows with 0 input or output tokens were left out)"
    )


def test_an_unknown_format(tmp_path) -> None:
    assert _refusal(tmp_path / "x.jsonl", "csv") == (
        "format: unknown trace format 'csv'; one of auto, mooncake, azure, burstgpt, bailian, jsonl"
    )


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        ('{"chat_id": 1}', "bailian"),
        ('{"parent_chat_id": 1, "input_tokens": 1, "output_tokens": 1}', "bailian"),
        ('{"input_length": 1, "output_length": 1, "input_tokens": 1, "output_tokens": 1}',
         "mooncake"),
        ('{"input_tokens": 1, "output_tokens": 1}', "jsonl"),
        (" TIMESTAMP , ContextTokens , GeneratedTokens ", "azure"),
        ("Timestamp,Request tokens,Response tokens", "burstgpt"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens,Timestamp,Request tokens,Response tokens",
         "azure"),
    ],
)  # fmt: skip
def test_detect_format(first: str, expected: str) -> None:
    assert detect_format("x", "\n  \n" + first + "\nrest") == expected


def test_detect_format_refusals() -> None:
    for text in ("", " \n\t\n"):
        with pytest.raises(ConfigError) as caught:
            detect_format("d/t.jsonl", text)
        assert str(caught.value) == "trace file d/t.jsonl is empty"
    with pytest.raises(ConfigError) as caught:
        detect_format("d/t.jsonl", "{oops\n")
    assert str(caught.value) == "d/t.jsonl:1: not valid JSON, cannot tell the trace format"
    with pytest.raises(ConfigError) as caught:
        detect_format("d/t.jsonl", '{"input_length": 1, "b": 2}\n')
    assert str(caught.value) == (
        "cannot tell the trace format of d/t.jsonl (extension .jsonl): its first line has keys "
        "['b', 'input_length']; mooncake needs input_length and output_length, bailian chat_id, "
        "jsonl input_tokens and output_tokens; or pass the format"
    )
    with pytest.raises(ConfigError) as caught:
        detect_format("d/trace", "TIMESTAMP,ContextTokens\n")
    assert str(caught.value) == (
        "cannot tell the trace format of d/trace (extension (none)): its first line "
        '"TIMESTAMP,ContextTokens" is neither a JSON object nor a known CSV header (azure needs '
        "TIMESTAMP, ContextTokens, GeneratedTokens; burstgpt needs Timestamp, Request tokens, "
        "Response tokens); or pass the format"
    )


def test_a_bad_json_line_quotes_the_parsers_reason_without_its_position(tmp_path) -> None:
    good = json.dumps({"timestamp": 0, "input_tokens": 5, "output_tokens": 1})
    path = _write(tmp_path, "o.jsonl", [good, "{nope"])
    assert (
        _refusal(path) == f"{path}:2: not valid JSON (unexpected character, expected a string key)"
    )
    first = {"chat_id": 1, "timestamp": 0, "input_length": 5, "output_length": 1}
    path = _write(tmp_path, "b.jsonl", [json.dumps(first), '{"a": 1,'])
    assert _refusal(path, "bailian") == f"{path}:2: not valid JSON (unexpected end of data)"


def test_the_token_count_columns_are_named_in_their_refusals(tmp_path) -> None:
    rows = {
        "ContextTokens": [AZURE_HEADER, "2023-11-16 18:15:46,x,1"],
        "GeneratedTokens": [AZURE_HEADER, "2023-11-16 18:15:46,1,-1"],
        "Request tokens": [BURSTGPT_HEADER, "1,ChatGPT,1.5,2,3,API log"],
        "Response tokens": [BURSTGPT_HEADER, "1,ChatGPT,1,y,3,API log"],
    }
    cells = {"ContextTokens": "x", "GeneratedTokens": "-1", "Request tokens": "1.5",
             "Response tokens": "y"}  # fmt: skip
    for column, lines in rows.items():
        path = _write(tmp_path, "t.csv", lines)
        assert _refusal(path) == (
            f'{path}:2: {column}: must be an integer >= 0, got "{cells[column]}"'
        )


def test_every_empty_row_is_counted(tmp_path) -> None:
    moon = [{"timestamp": t, "input_length": i, "output_length": o}
            for t, i, o in [(0, 5, 0), (1, 0, 5), (2, 5, 5), (3, 0, 0)]]  # fmt: skip
    assert read_trace(_objects(tmp_path, "m.jsonl", moon)).skipped_empty == 3
    bailian = [{**row, "chat_id": n} for n, row in enumerate(moon)]
    assert read_trace(_objects(tmp_path, "b.jsonl", bailian)).skipped_empty == 3


def test_bailian_refuses_backwards_timestamps_with_the_field(tmp_path) -> None:
    rows = [{"chat_id": n, "timestamp": t, "input_length": 5, "output_length": 1}
            for n, t in enumerate([3, 2.5])]  # fmt: skip
    path = _objects(tmp_path, "b.jsonl", rows)
    assert _refusal(path) == (
        f"{path}:2: timestamp: 2.5 is earlier than the line before (3.0): the trace must be "
        "sorted by time (sort the file by this column first)"
    )


def test_exactly_mooncakes_two_keys_are_mooncake() -> None:
    assert detect_format("x", '{"output_length": 1, "input_length": 2}') == "mooncake"
