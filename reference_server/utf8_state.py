"""The UTF-8 decoder state of a sequence's output bytes (RFC 3629), and which byte tokens may be
sampled next so that every output is valid UTF-8 made of printable characters.

Plain Python, one table lookup per token. It knows nothing about tensors, sampling or requests:
`logits_mask.py` turns `allowed_bytes` into a mask table and advances each sequence's state.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BOUNDARY",
    "MAX_CHAR_BYTES",
    "NUM_STATES",
    "advance",
    "allowed_bytes",
    "bytes_to_finish",
    "completes_char",
    "is_valid_utf8",
]

MAX_CHAR_BYTES = 4
_NUM_BYTES = 256

# A state says what the next byte must be. BOUNDARY: between characters. The restricted second
# bytes are RFC 3629's: no overlong forms (E0, F0), no surrogates (ED), nothing past U+10FFFF (F4).
BOUNDARY = 0
_NEED1 = 1  # 80..BF, then a boundary
_NEED1_AFTER_C2 = 2  # like _NEED1; its own state only so sampling can skip C1 controls
_NEED2 = 3  # 80..BF, then _NEED1
_NEED2_AFTER_E0 = 4  # A0..BF
_NEED2_AFTER_ED = 5  # 80..9F
_NEED3 = 6  # 80..BF, then _NEED2
_NEED3_AFTER_F0 = 7  # 90..BF
_NEED3_AFTER_F4 = 8  # 80..8F
NUM_STATES = 9
_INVALID = -1

# state -> (lowest, highest continuation byte, state after it)
_CONTINUATION = {
    _NEED1: (0x80, 0xBF, BOUNDARY),
    _NEED1_AFTER_C2: (0x80, 0xBF, BOUNDARY),
    _NEED2: (0x80, 0xBF, _NEED1),
    _NEED2_AFTER_E0: (0xA0, 0xBF, _NEED1),
    _NEED2_AFTER_ED: (0x80, 0x9F, _NEED1),
    _NEED3: (0x80, 0xBF, _NEED2),
    _NEED3_AFTER_F0: (0x90, 0xBF, _NEED2),
    _NEED3_AFTER_F4: (0x80, 0x8F, _NEED2),
}
_BYTES_TO_FINISH = (0, 1, 1, 2, 2, 2, 3, 3, 3)

# Control characters (Unicode Cc: C0, DEL, C1) are valid UTF-8 but never sampled, except tab
# and newline: NUL truncates C strings, CR is rewritten by universal-newline readers, and the
# rest are dropped or mangled by terminals, log viewers and line-oriented tools, after which a
# client would count other tokens than `usage` reports. Tab and newline keep output shaped.
_ALLOWED_CONTROLS = (0x09, 0x0A)
_C1_CONTROLS_END = 0xA0  # U+0080..U+009F are C2 80..C2 9F


def _strict_next(state: int, byte: int) -> int:
    if state != BOUNDARY:
        low, high, then = _CONTINUATION[state]
        return then if low <= byte <= high else _INVALID
    if byte < 0x80:
        return BOUNDARY
    if byte == 0xC2:
        return _NEED1_AFTER_C2
    if 0xC3 <= byte <= 0xDF:
        return _NEED1
    if byte == 0xE0:
        return _NEED2_AFTER_E0
    if byte == 0xED:
        return _NEED2_AFTER_ED
    if 0xE1 <= byte <= 0xEF:
        return _NEED2
    if byte == 0xF0:
        return _NEED3_AFTER_F0
    if 0xF1 <= byte <= 0xF3:
        return _NEED3
    if byte == 0xF4:
        return _NEED3_AFTER_F4
    return _INVALID  # 80..BF stray continuation, C0/C1 overlong leads, F5..FF


def _char_bytes(lead: int) -> int:
    """Bytes of the character a (valid) lead byte starts."""
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _resync_next(state: int, byte: int) -> int:
    # Only sampled bytes reach a sequence's state, so they are valid; a hand-built output may
    # not be. Like Python's decoder, an invalid byte ends the broken character and is read
    # again from a boundary (and a byte invalid there too leaves the boundary as it was).
    following = _strict_next(state, byte)
    if following == _INVALID and state != BOUNDARY:
        following = _strict_next(BOUNDARY, byte)
    return BOUNDARY if following == _INVALID else following


# Constant data computed from the rules above: (NUM_STATES, 256) next states.
_NEXT: tuple[tuple[int, ...], ...] = tuple(
    tuple(_resync_next(state, byte) for byte in range(_NUM_BYTES)) for state in range(NUM_STATES)
)


def advance(state: int, token_ids: Sequence[int], start: int = 0) -> int:
    """The state after token_ids[start:], starting from `state`. Ids >= 256 carry no text and
    leave it unchanged."""
    table = _NEXT
    for index in range(start, len(token_ids)):
        token = token_ids[index]
        if token < _NUM_BYTES:
            state = table[state][token]
    return state


def bytes_to_finish(state: int) -> int:
    """Bytes still needed to complete the current character (0 at a boundary)."""
    return _BYTES_TO_FINISH[state]


def completes_char(state: int, byte: int) -> bool:
    """Whether `byte` is valid in `state` and leaves the output on a character boundary."""
    return _strict_next(state, byte) == BOUNDARY


def allowed_bytes(state: int, num_remaining_tokens: int) -> list[int]:
    """The bytes sampling may pick in `state` when `num_remaining_tokens` tokens (this one
    included) are left: valid continuations only, no control characters but tab and newline,
    and at a boundary only characters that fit the budget, so max_tokens never cuts one."""
    allowed = []
    for byte in range(_NUM_BYTES):
        if _strict_next(state, byte) == _INVALID:
            continue
        if state == BOUNDARY:
            is_control = byte < 0x20 or byte == 0x7F
            if is_control and byte not in _ALLOWED_CONTROLS:
                continue
            if _char_bytes(byte) > num_remaining_tokens:
                continue
        elif state == _NEED1_AFTER_C2 and byte < _C1_CONTROLS_END:
            continue
        allowed.append(byte)
    return allowed


def is_valid_utf8(data: bytes) -> bool:
    """Whether the state machine accepts `data` (the same verdict as a strict decoder)."""
    state = BOUNDARY
    for byte in data:
        state = _strict_next(state, byte)
        if state == _INVALID:
            return False
    return state == BOUNDARY
