"""The UTF-8 state machine and the allowed-token mask built on it: the machine accepts exactly
valid UTF-8, sampling only allowed bytes always yields valid, printable UTF-8 that fits its
token budget, and the per-request rules (EOS, stop_token_ids, min_tokens) hold."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.logits_mask import AllowedTokenMask, mask_row
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence
from reference_server.utf8_state import (
    BOUNDARY,
    MAX_CHAR_BYTES,
    NUM_STATES,
    advance,
    allowed_bytes,
    bytes_to_finish,
    completes_char,
    is_valid_utf8,
)

EOS = 257
VOCAB = 263
# Bytes that sit on RFC 3629's range edges, so short random strings hit every rule.
EDGE_BYTES = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
              0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]  # fmt: skip


def _strictly_decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(deadline=None, max_examples=400)
@given(st.binary(max_size=12) | st.lists(st.sampled_from(EDGE_BYTES), max_size=8).map(bytes))
def test_the_state_machine_accepts_exactly_what_python_decodes(data: bytes) -> None:
    assert is_valid_utf8(data) == _strictly_decodes(data)


def test_the_state_machine_agrees_with_python_on_many_random_edge_strings() -> None:
    rng = random.Random(3629)
    for _ in range(20_000):
        data = bytes(rng.choice(EDGE_BYTES) for _ in range(rng.randrange(1, 7)))
        assert is_valid_utf8(data) == _strictly_decodes(data), data


def _sample_walk(allowed: dict, num_tokens: int, rng: random.Random) -> bytes:
    state, out = BOUNDARY, bytearray()
    for position in range(num_tokens):
        byte = rng.choice(allowed[(state, min(num_tokens - position, MAX_CHAR_BYTES))])
        out.append(byte)
        state = advance(state, [byte])
    assert state == BOUNDARY
    return bytes(out)


def test_any_walk_through_allowed_bytes_is_valid_printable_utf8_of_exactly_its_budget() -> None:
    allowed = {
        (state, budget): allowed_bytes(state, budget)
        for state in range(NUM_STATES)
        for budget in range(1, MAX_CHAR_BYTES + 1)
    }
    rng = random.Random(7)
    seen_lengths = set()
    for _ in range(3000):
        num_tokens = rng.randrange(1, 12)
        data = _sample_walk(allowed, num_tokens, rng)
        assert len(data) == num_tokens
        text = data.decode("utf-8")  # strict: raises on anything invalid
        assert not any(_is_control(c) and c not in "\t\n" for c in text)
        seen_lengths.update(len(c.encode()) for c in text)
    assert seen_lengths == {1, 2, 3, 4}


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0


def test_allowed_bytes_spell_exactly_the_non_control_characters_plus_tab_and_newline() -> None:
    allowed = [set(allowed_bytes(state, MAX_CHAR_BYTES)) for state in range(NUM_STATES)]
    for code in range(0x110000):
        if 0xD800 <= code < 0xE000:
            continue  # surrogates have no UTF-8 form
        state, spelled = BOUNDARY, True
        for byte in chr(code).encode("utf-8"):
            if byte not in allowed[state]:
                spelled = False
                break
            state = advance(state, [byte])
        expected = chr(code) in "\t\n" or not _is_control(chr(code))
        assert spelled == expected, hex(code)


def test_the_budget_admits_only_characters_that_fit() -> None:
    for budget in range(1, MAX_CHAR_BYTES + 1):
        leads = allowed_bytes(BOUNDARY, budget)
        assert max(_char_len(b) for b in leads) == budget
    assert all(b < 0x80 for b in allowed_bytes(BOUNDARY, 1))
    for state in range(1, NUM_STATES):
        assert allowed_bytes(state, 1) == allowed_bytes(state, MAX_CHAR_BYTES)  # started: finish


def _char_len(lead: int) -> int:
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def test_state_tracking_resyncs_after_invalid_bytes_like_the_decoder() -> None:
    # Hand-built outputs may be invalid; the state must still be the decoder's view.
    assert advance(BOUNDARY, [0xE2, 0x41]) == BOUNDARY  # "A" ends the broken character
    assert bytes_to_finish(advance(BOUNDARY, [0xE2, 0xC3])) == 1  # C3 starts a new one
    assert advance(BOUNDARY, [0x80, 0xFF]) == BOUNDARY
    assert advance(BOUNDARY, [0xE2, 0x82, 300, 0xAC]) == BOUNDARY  # ids >= 256 carry no text
    assert completes_char(advance(BOUNDARY, [0xC3]), 0xA9)
    assert not completes_char(BOUNDARY, 0xC3)


# -- the mask ----------------------------------------------------------------------------------


def _seq(outputs: list[int], **params) -> Sequence:
    seq = Sequence("r", [65], SamplingParams(**params), priority="interactive", arrival_time=0.0)
    seq.output_token_ids.extend(outputs)
    return seq


def _allowed(mask: AllowedTokenMask, seq: Sequence) -> set[int]:
    logits = torch.zeros(1, mask.vocab_size)
    mask.apply(logits, [seq])
    return set(torch.nonzero(torch.isfinite(logits[0])).flatten().tolist())


def test_mask_rows_split_the_boundary_by_budget_only() -> None:
    assert mask_row(BOUNDARY, 100) == mask_row(BOUNDARY, MAX_CHAR_BYTES) == BOUNDARY
    assert len({mask_row(BOUNDARY, n) for n in range(1, MAX_CHAR_BYTES + 1)}) == MAX_CHAR_BYTES
    assert all(mask_row(state, 1) == state for state in range(1, NUM_STATES))


def test_the_synthetic_mask_allows_bytes_only_and_eos_nowhere() -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    assert _allowed(mask, _seq([])) == set(allowed_bytes(BOUNDARY, MAX_CHAR_BYTES))
    assert _allowed(mask, _seq([0xE2])) == set(range(0x80, 0xC0))
    assert _allowed(mask, _seq([0xF0])) == set(range(0x90, 0xC0))  # no overlong 4-byte forms
    assert _allowed(mask, _seq([0xED])) == set(range(0x80, 0xA0))  # no surrogates
    assert _allowed(mask, _seq([0xC2])) == set(range(0xA0, 0xC0))  # no C1 controls


def test_a_loaded_model_may_end_only_between_characters_and_never_on_other_specials() -> None:
    mask = AllowedTokenMask(vocab_size=300, eos_token_id=EOS, allow_eos=True, device="cpu")
    at_boundary = _allowed(mask, _seq([0x41]))
    assert EOS in at_boundary and max(at_boundary - {EOS}) < 256  # no bos/pad/markers/ids >= 263
    assert EOS not in _allowed(mask, _seq([0xE2, 0x82]))
    assert EOS not in _allowed(mask, _seq([], ignore_eos=True))
    assert EOS not in _allowed(mask, _seq([0x41], min_tokens=2))
    assert EOS in _allowed(mask, _seq([0x41, 0x42], min_tokens=2))


def test_the_budget_follows_max_tokens() -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    assert max(_allowed(mask, _seq([0x41] * 3, max_tokens=4))) < 0x80
    assert max(_allowed(mask, _seq([0x41] * 2, max_tokens=4))) < 0xE0
    assert max(_allowed(mask, _seq([], max_tokens=3))) < 0xF0
    assert max(_allowed(mask, _seq([], max_tokens=4))) == 0xF4


def test_stop_token_ids_may_end_the_output_only_on_a_character_boundary() -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    assert EOS in _allowed(mask, _seq([], stop_token_ids=[EOS]))
    assert EOS not in _allowed(mask, _seq([0xC3], stop_token_ids=[EOS]))
    assert EOS not in _allowed(mask, _seq([], stop_token_ids=[EOS], min_tokens=1))
    # A byte stop token that would leave a partial character is never drawn...
    assert 0xC3 not in _allowed(mask, _seq([], stop_token_ids=[0xC3]))
    assert 0xA9 not in _allowed(mask, _seq([0xE2], stop_token_ids=[0xA9]))
    # ...one that completes the character is.
    assert 0xA9 in _allowed(mask, _seq([0xC3], stop_token_ids=[0xA9]))


def test_rules_that_leave_nothing_to_draw_fall_back_to_the_utf8_row() -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    # After E0 only A0..BF may follow, none completes the character, all are stop tokens.
    every_continuation = tuple(range(0xA0, 0xC0))
    assert _allowed(mask, _seq([0xE0], stop_token_ids=every_continuation)) == set(
        every_continuation
    )


def test_state_is_advanced_incrementally_and_restarts_when_the_output_is_replaced() -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    seq = _seq([0x41])
    _allowed(mask, seq)
    assert (seq.utf8_state, seq.num_utf8_tokens) == (BOUNDARY, 1)
    seq.output_token_ids.append(0xF0)
    assert _allowed(mask, seq) == set(range(0x90, 0xC0))
    assert seq.num_utf8_tokens == 2 and bytes_to_finish(seq.utf8_state) == 3
    seq.output_token_ids = [0xE2]
    assert _allowed(mask, seq) == set(range(0x80, 0xC0))


def test_a_vocabulary_without_all_bytes_is_left_unconstrained() -> None:
    mask = AllowedTokenMask(vocab_size=100, eos_token_id=3, allow_eos=True, device="cpu")
    assert _allowed(mask, _seq([])) == set(range(100))
    assert 3 not in _allowed(mask, _seq([], ignore_eos=True))


@pytest.mark.parametrize("rows", [1, 5])
def test_apply_masks_each_row_by_its_own_sequence(rows: int) -> None:
    mask = AllowedTokenMask(vocab_size=VOCAB, eos_token_id=EOS, allow_eos=False, device="cpu")
    seqs = [_seq([0xE2] if i % 2 else []) for i in range(rows)]
    logits = torch.zeros(rows, VOCAB)
    mask.apply(logits, seqs)
    for row, seq in enumerate(seqs):
        assert set(torch.nonzero(torch.isfinite(logits[row])).flatten().tolist()) == _allowed(
            mask, seq
        )
