"""The allowed-token mask added to a step's logits before sampling (a logits processor, in vLLM's
terms): every output is valid, printable UTF-8 that ends on a character boundary, and each
request's rules on EOS, special tokens, stop_token_ids and min_tokens hold.

It owns a precomputed (rows, vocab) table of 0 / -inf, one row per UTF-8 state (the boundary
split by how many tokens are left), and advances each sequence's UTF-8 state as its output grows
(one table lookup per new token, never a rescan). In thinking mode the reasoning ends on a
character boundary too and cannot be cut short by EOS or a stop token id. It knows nothing
about the model or about scheduling; the model runner calls `apply` once per step on the rows
it samples.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf
from typing import TYPE_CHECKING

import torch

from reference_server.tokenizer import NUM_BYTE_TOKENS
from reference_server.utf8_state import (
    BOUNDARY,
    MAX_CHAR_BYTES,
    NUM_STATES,
    advance,
    allowed_bytes,
    completes_char,
)

if TYPE_CHECKING:
    from reference_server.sequence import Sequence

__all__ = ["AllowedTokenMask", "mask_row"]

_NEG_INF = float("-inf")
# Rows 0..NUM_STATES-1 are the states with any budget left (a character already started was
# checked against the budget when its lead byte was drawn); the rows after them are the
# boundary with 1, 2 or 3 tokens left, where only characters that fit may start.
_NUM_ROWS = NUM_STATES + MAX_CHAR_BYTES - 1
_BOUNDARY_ROWS = (BOUNDARY, *range(NUM_STATES, _NUM_ROWS))


def mask_row(state: int, num_remaining_tokens: int) -> int:
    """The table row for a sequence in `state` with `num_remaining_tokens` (>= 1) to draw."""
    if state != BOUNDARY or num_remaining_tokens >= MAX_CHAR_BYTES:
        return state
    return NUM_STATES + max(num_remaining_tokens, 1) - 1


class AllowedTokenMask:
    """The table for one model's vocabulary, and `apply` for each step's sampled rows.

    Ids >= 256 carry no text for the byte tokenizer: they are never sampled except EOS at a
    character boundary (when `allow_eos`) and a request's own special stop_token_ids there, so
    every sampled token is text a client's tokenizer counts the same way as `usage`. That covers
    a loaded checkpoint's bigger vocabulary too (its extra ids could only emit invisible tokens).
    """

    def __init__(
        self, *, vocab_size: int, eos_token_id: int, allow_eos: bool, device: torch.device
    ) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.allow_eos = allow_eos
        if vocab_size < NUM_BYTE_TOKENS:
            # A vocabulary without all 256 bytes is not the byte vocabulary: its ids are no
            # UTF-8 to keep valid, so only the per-request rules apply.
            table = torch.zeros((_NUM_ROWS, vocab_size), dtype=torch.float32)
        else:
            table = torch.full((_NUM_ROWS, vocab_size), _NEG_INF, dtype=torch.float32)
            for row in range(_NUM_ROWS):
                if row < NUM_STATES:
                    state, budget = row, MAX_CHAR_BYTES
                else:
                    state, budget = BOUNDARY, row - NUM_STATES + 1
                table[row, allowed_bytes(state, budget)] = 0.0
            if allow_eos and NUM_BYTE_TOKENS <= eos_token_id < vocab_size:
                table[list(_BOUNDARY_ROWS), eos_token_id] = 0.0
        self.table = table.to(device)  # (rows, vocab) float32: 0 allowed, -inf not

    def apply(self, logits: torch.Tensor, seqs: SequenceOf[Sequence]) -> None:
        """Adds to `logits` (len(seqs), vocab), in place, each row's mask."""
        rows: list[int] = []
        allow: tuple[list[int], list[int]] = ([], [])  # (row, token) pairs
        ban: tuple[list[int], list[int]] = ([], [])
        for row, seq in enumerate(seqs):
            output = seq.output_token_ids
            num_output = len(output)
            if seq.num_utf8_tokens != num_output:
                if seq.num_utf8_tokens > num_output:  # the output was replaced: start over
                    seq.utf8_state, seq.num_utf8_tokens = BOUNDARY, 0
                seq.utf8_state = advance(seq.utf8_state, output, seq.num_utf8_tokens)
                seq.num_utf8_tokens = num_output
            state = seq.utf8_state
            params = seq.sampling_params
            # Thinking mode: reasoning must end on a character boundary too (its text and the
            # answer's are separate strings), and runs its full length (no EOS, no stop id).
            thinking_end = params.num_thinking_tokens
            if num_output < thinking_end:
                rows.append(mask_row(state, thinking_end - num_output))
            else:
                rows.append(mask_row(state, params.max_tokens - num_output))
            if (
                params.stop_token_ids
                or params.ignore_eos
                or params.min_tokens > num_output
                or thinking_end > num_output
            ):
                self._request_rules(row, seq, state, allow, ban)
            elif self.eos_token_id < NUM_BYTE_TOKENS:
                self._check_ending_byte(row, state, self.eos_token_id, ban)
        index = torch.tensor(rows, dtype=torch.int64, device=self.table.device)
        mask = self.table.index_select(0, index)  # (rows, vocab), a fresh tensor
        # Bans after allowances: min_tokens and ignore_eos win over a stop token's allowance.
        if allow[0]:
            mask[allow] = 0.0
        if ban[0]:
            mask[ban] = _NEG_INF
            # Banning a special id leaves the row its bytes; only banned bytes (or a vocabulary
            # without them) can leave nothing, so only then pay for the check (a device sync).
            if self.vocab_size < NUM_BYTE_TOKENS or min(ban[1]) < NUM_BYTE_TOKENS:
                self._undo_dead_ends(mask, index)
        logits += mask

    def _undo_dead_ends(self, mask: torch.Tensor, index: torch.Tensor) -> None:
        dead = (mask == _NEG_INF).all(dim=-1)  # (rows,)
        if bool(dead.any()):
            # The request's own rules left nothing to draw (every continuation of a started
            # character is one of its stop tokens, say): its UTF-8 row alone decides.
            mask[dead] = self.table.index_select(0, index[dead])

    def _request_rules(
        self,
        row: int,
        seq: Sequence,
        state: int,
        allow: tuple[list[int], list[int]],
        ban: tuple[list[int], list[int]],
    ) -> None:
        params = seq.sampling_params
        eos = self.eos_token_id
        stop_ids = [t for t in params.stop_token_ids if t < self.vocab_size]
        for token in stop_ids:
            if token < NUM_BYTE_TOKENS:
                self._check_ending_byte(row, state, token, ban)
            elif state == BOUNDARY:
                # A special stop token ends the output with no text: fine between characters.
                allow[0].append(row)
                allow[1].append(token)
        if params.ignore_eos and eos not in stop_ids:
            if self.allow_eos:  # else the table has it masked already
                ban[0].append(row)
                ban[1].append(eos)
        elif eos < NUM_BYTE_TOKENS:
            self._check_ending_byte(row, state, eos, ban)
        if max(params.min_tokens, params.num_thinking_tokens) > len(seq.output_token_ids):
            for token in (eos, *stop_ids):
                ban[0].append(row)
                ban[1].append(token)

    @staticmethod
    def _check_ending_byte(
        row: int, state: int, token: int, ban: tuple[list[int], list[int]]
    ) -> None:
        # A byte that ends the request must end its character too, or the text would close on
        # a dangling partial character.
        if not completes_char(state, token):
            ban[0].append(row)
            ban[1].append(token)
