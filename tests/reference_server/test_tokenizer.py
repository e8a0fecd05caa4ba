"""Byte tokenizer, chat template and streaming detokenizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.errors import RequestValidationError
from reference_server.tokenizer import ByteTokenizer, StreamingDetokenizer

TOKENIZER = ByteTokenizer()


@settings(deadline=None)  # a busy shared CPU must not turn slowness into failure
@given(st.text())
def test_encode_then_decode_returns_the_text(text: str) -> None:
    ids = TOKENIZER.encode(text, add_bos=True)
    assert ids[0] == TOKENIZER.bos_token_id
    assert all(0 <= t < 256 for t in ids[1:])
    assert TOKENIZER.decode(ids) == text


@settings(deadline=None)
@given(st.text())
def test_streaming_bytes_one_by_one_yields_exactly_the_text(text: str) -> None:
    detok = StreamingDetokenizer(TOKENIZER)
    pieces = [detok.push(t) for t in TOKENIZER.encode(text)]
    pieces.append(detok.flush())
    assert "".join(pieces) == text
    # Every piece is whole characters: it re-encodes to exactly the bytes it came from.
    assert b"".join(p.encode("utf-8") for p in pieces) == text.encode("utf-8")


def test_streaming_holds_back_an_incomplete_character() -> None:
    detok = StreamingDetokenizer(TOKENIZER)
    euro = "€".encode()  # three bytes
    assert detok.push(euro[0]) == ""
    assert detok.push(euro[1]) == ""
    assert detok.push(euro[2]) == "€"
    assert detok.flush() == ""


@settings(deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=TOKENIZER.vocab_size - 1)))
def test_streaming_matches_one_shot_decode_for_any_ids(ids: list[int]) -> None:
    detok = StreamingDetokenizer(TOKENIZER)
    streamed = "".join(detok.push(t) for t in ids) + detok.flush()
    assert streamed == TOKENIZER.decode(ids)


def test_dangling_bytes_flush_as_replacement_character() -> None:
    detok = StreamingDetokenizer(TOKENIZER)
    assert detok.push("é".encode()[0]) == ""
    assert detok.flush() == "\ufffd"


def test_special_tokens_carry_no_text() -> None:
    ids = [TOKENIZER.bos_token_id, *TOKENIZER.encode("hi"), TOKENIZER.eos_token_id, 9999]
    assert TOKENIZER.decode(ids) == "hi"
    detok = StreamingDetokenizer(TOKENIZER)
    assert detok.push(TOKENIZER.pad_token_id) == ""


def test_negative_token_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        TOKENIZER.decode([104, -1])


def test_special_ids_sit_above_the_bytes_and_are_distinct() -> None:
    specials = TOKENIZER.special_token_ids
    assert min(specials) == 256
    assert len(set(specials)) == len(specials) == TOKENIZER.vocab_size - 256
    assert {TOKENIZER.bos_token_id, TOKENIZER.eos_token_id, TOKENIZER.pad_token_id} <= set(specials)


def test_chat_template_is_deterministic_and_framed_by_role_markers() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hé"},
    ]
    ids = TOKENIZER.apply_chat_template(messages)
    assert ids == TOKENIZER.apply_chat_template(messages)
    roles = TOKENIZER.role_token_ids
    end = TOKENIZER.end_of_turn_token_id
    expected = [
        TOKENIZER.bos_token_id,
        roles["system"],
        *b"be brief",
        end,
        roles["user"],
        *"hé".encode(),
        end,
        roles["assistant"],
    ]
    assert ids == expected


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
    ],
)
def test_bad_chat_messages_name_the_field(messages: list, field: str) -> None:
    with pytest.raises(RequestValidationError) as info:
        TOKENIZER.apply_chat_template(messages)
    assert info.value.field == field
