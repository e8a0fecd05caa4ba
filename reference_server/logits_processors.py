"""Per-row logits processors applied after the allowed-token mask and before sampling: OpenAI's
logit_bias, then vLLM's repetition, frequency and presence penalties, in vLLM's order.

Each row gets only its own request's settings, computed from its own tokens, so a row's
penalty never reaches its neighbours and a row's result does not depend on the batch. A step
without any of these settings costs one pass over the rows' parameters. It knows nothing about
the model or scheduling; the model runner calls `apply_logits_processors` on the sampled rows.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from reference_server.sequence import Sequence

__all__ = ["apply_logits_processors"]


def apply_logits_processors(logits: torch.Tensor, seqs: SequenceOf[Sequence]) -> None:
    """logits (len(seqs), vocab) float32, in place. Masked (-inf) logits stay -inf."""
    bias_rows: list[int] = []
    penalty_rows: list[int] = []
    for row, seq in enumerate(seqs):
        params = seq.sampling_params
        if params.logit_bias:
            bias_rows.append(row)
        if params.has_penalties:
            penalty_rows.append(row)
    if bias_rows:
        _apply_logit_bias(logits, seqs, bias_rows)
    if penalty_rows:
        _apply_penalties(logits, seqs, penalty_rows)


def _apply_logit_bias(logits: torch.Tensor, seqs: SequenceOf[Sequence], rows: list[int]) -> None:
    vocab_size = logits.shape[-1]
    index: tuple[list[int], list[int]] = ([], [])
    values: list[float] = []
    for row in rows:
        for token_id, bias in seqs[row].sampling_params.logit_bias:
            if token_id < vocab_size:  # validated against the vocabulary at the API
                index[0].append(row)
                index[1].append(token_id)
                values.append(bias)
    if values:
        logits[index] += torch.tensor(values, dtype=logits.dtype, device=logits.device)


def _apply_penalties(logits: torch.Tensor, seqs: SequenceOf[Sequence], rows: list[int]) -> None:
    vocab_size = logits.shape[-1]
    device = logits.device
    num_rows = len(rows)
    params = [seqs[row].sampling_params for row in rows]
    # Output token counts per row: (rows, vocab + 1), the last column a sink for padding.
    outputs = [seqs[row].output_token_ids for row in rows]
    width = max(1, max(len(ids) for ids in outputs))
    padded = torch.full((num_rows, width), vocab_size, dtype=torch.int64)
    for i, ids in enumerate(outputs):
        if ids:
            padded[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    padded = padded.clamp_(max=vocab_size).to(device)
    counts = torch.zeros((num_rows, vocab_size + 1), dtype=torch.float32, device=device)
    counts.scatter_add_(1, padded, torch.ones_like(padded, dtype=torch.float32))
    counts = counts[:, :vocab_size]  # (rows, vocab)
    row_index = torch.tensor(rows, dtype=torch.int64, device=device)
    selected = logits.index_select(0, row_index)  # (rows, vocab)
    repetition = [p.repetition_penalty for p in params]
    if any(r != 1.0 for r in repetition):
        # vLLM: over prompt and output tokens; a positive logit is divided, a negative multiplied.
        seen = counts > 0
        for i, row in enumerate(rows):
            if repetition[i] != 1.0:
                prompt = [t for t in seqs[row].prompt_token_ids if t < vocab_size]
                seen[i, torch.tensor(prompt, dtype=torch.int64, device=device)] = True
        penalty = torch.tensor(repetition, dtype=torch.float32, device=device)[:, None]
        scaled = torch.where(selected > 0, selected / penalty, selected * penalty)
        selected = torch.where(seen, scaled, selected)
    frequency = torch.tensor([p.frequency_penalty for p in params], device=device)[:, None]
    presence = torch.tensor([p.presence_penalty for p in params], device=device)[:, None]
    selected = selected - frequency * counts - presence * (counts > 0).to(torch.float32)
    logits.index_copy_(0, row_index, selected)
