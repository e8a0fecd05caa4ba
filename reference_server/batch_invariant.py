"""The batch-invariant kernels (EngineConfig.batch_invariant): each token row's result depends on
that row's inputs only, never on how many rows share the step, how they are padded, or whether
the token is computed in a decode, a prefill chunk or a preemption recompute.

Two measured facts of the CPU BLAS (MKL sgemm, benchmarks/bench_batch_invariance.py) make this
cheap instead of a per-row loop:
- a row of a matrix product comes out the same for every row count that is a multiple of
  ROW_QUANTUM (4), and differently for 1-3 rows (another kernel): so every product's row count is
  padded to a multiple of 4;
- a reduction whose length varies with the padding (the softmax sum and probs @ values over a
  bucket's longest context) does not: so attention reduces over fixed key blocks of
  KEY_BLOCK_TOKENS (the key length padded to a multiple, alone as in a batch), each block a
  product of fixed shape, and adds the block partials up in order with a sequential scan, where
  the zero partials of padding blocks change nothing.
Shape comments follow attention.py. It knows tensors only; the model and attention call it.
"""

from __future__ import annotations

import torch
from torch.nn import functional

__all__ = [
    "KEY_BLOCK_TOKENS",
    "ROW_QUANTUM",
    "invariant_attend",
    "key_blocks_per_reduction",
    "row_padded_linear",
]

ROW_QUANTUM = 4
# Keys reduced together in one fixed-shape product: bigger blocks mean fewer partials to add up
# (16-key blocks made a 512-token prefill cost 3.3x the default forward; 128: about 1x).
KEY_BLOCK_TOKENS = 128


def key_blocks_per_reduction(block_size: int) -> int:
    """KV blocks per fixed reduction block: the bucket's key length is padded to a multiple."""
    return max(1, KEY_BLOCK_TOKENS // block_size)


def row_padded_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (rows, in) @ weight.T with the row count padded to a multiple of ROW_QUANTUM."""
    rows = x.shape[0]
    extra = -rows % ROW_QUANTUM
    if not extra:
        return functional.linear(x, weight)
    padded = torch.cat([x, x.new_zeros(extra, x.shape[1])])
    return functional.linear(padded, weight)[:rows]


def invariant_attend(
    query: torch.Tensor,  # (kv_heads, B, group * rows, head_dim), already scaled
    keys: torch.Tensor,  # (kv_heads, B, L, head_dim), L a multiple of key_block
    values: torch.Tensor,  # (kv_heads, B, L, head_dim)
    bias: torch.Tensor,  # (B, rows, L) 0 = attend, -inf = masked
    group: int,
    key_block: int,
) -> torch.Tensor:
    """Softmax attention whose every output row is independent of B, L's padding and the other
    query rows (group * rows must be a multiple of ROW_QUANTUM: the caller pads the rows)."""
    num_kv_heads, batch, num_rows, head_dim = query.shape
    length = keys.shape[2]
    num_blocks = length // key_block
    rows = num_rows // group
    # Scores straight into block layout, one fixed-shape product per key block:
    # (kv_heads, B, 1, group*rows, head_dim) @ (kv_heads, B, num_blocks, head_dim, key_block)
    scores = torch.matmul(
        query[:, :, None],
        keys.view(num_kv_heads, batch, num_blocks, key_block, head_dim).transpose(-1, -2),
    ).float()  # (kv_heads, B, num_blocks, group*rows, key_block)
    block_bias = bias.view(batch, rows, num_blocks, key_block).transpose(1, 2)  # (B, nb, rows, kb)
    scores.view(num_kv_heads, batch, num_blocks, group, rows, key_block).add_(
        block_bias[None, :, :, None]
    )
    # The max is exact whatever the order; exp(x - max) is elementwise; padding gives exact 0.
    peak = scores.amax(dim=(2, 4), keepdim=True)  # (kv_heads, B, 1, group*rows, 1)
    probs = torch.exp_(scores.sub_(peak))
    partial = torch.matmul(
        probs.to(values.dtype), values.view(num_kv_heads, batch, num_blocks, key_block, head_dim)
    ).float()  # (kv_heads, B, num_blocks, group*rows, head_dim)
    denominators = probs.sum(dim=-1)  # (kv_heads, B, num_blocks, group*rows)
    # A scan adds the blocks in order, so trailing zero blocks leave the total bit-identical.
    numerator = partial.cumsum(dim=2)[:, :, -1]  # (kv_heads, B, group*rows, head_dim)
    denominator = denominators.cumsum(dim=2)[:, :, -1]  # (kv_heads, B, group*rows)
    return (numerator / denominator[..., None]).to(query.dtype)
