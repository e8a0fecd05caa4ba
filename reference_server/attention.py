"""Paged attention: the per-step index tensors (AttentionMetadata) and the plain-torch reference
kernel that writes new K/V into a paged pool and attends through block tables.

It knows block tables, slots and heads; it does not know sequences, schedulers or sampling.
A step's tokens are flattened chunk after chunk. Chunks are grouped into a few buckets by
power-of-two query length and context length (decodes with similar contexts share one);
a bucket larger than MAX_BUCKET_BLOCKS gathered blocks is split so its gather stays
cache-sized; within a bucket queries are padded to the longest chunk, whole K/V blocks are gathered
through a padded block table, and a precomputed additive mask (0 / -inf) is applied before an
fp32 softmax. No Python loop runs per token; the index tensors are built once per step and
shared by every layer. With `batch_invariant` the buckets' query rows are padded and the
softmax and values product go through batch_invariant.invariant_attend.

The pool is heads-major, (2, kv_heads, num_blocks, block_size, head_dim) per layer, so a block
gather lands directly in the (kv_heads, batch, keys, head_dim) layout batched matmul wants:
no copy of the gathered keys besides the gather itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from itertools import accumulate

import torch

from reference_server.batch_invariant import invariant_attend, key_blocks_per_reduction

__all__ = [
    "AttentionBucket",
    "AttentionMetadata",
    "build_attention_metadata",
    "paged_attention",
]


@dataclass(frozen=True, slots=True)
class AttentionBucket:
    """Chunks that attend together: queries padded to the bucket's longest chunk, keys to its
    longest context."""

    token_index: torch.Tensor  # (B, max_query) flat token of each query row
    query_valid: torch.Tensor | None  # (B, max_query); None when no row is padding
    block_tables: torch.Tensor  # (B, num_blocks)
    bias: torch.Tensor  # (B, max_query, num_blocks * block_size) 0 = attend, -inf = masked


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    """Index tensors shared by every layer of one forward."""

    num_tokens: int
    positions: torch.Tensor  # (num_tokens,) absolute position of each query token
    slot_mapping: torch.Tensor  # (num_tokens,) flat pool slot where each new K/V goes
    buckets: tuple[AttentionBucket, ...]
    # Batch-invariant attention (batch_invariant.py); the buckets' query rows are then padded.
    batch_invariant: bool = False


def _bucket_key(query_len: int, context_blocks: int) -> tuple[int, int]:
    # Power-of-two classes bound padding waste to about 2x in queries and keys, so a step that
    # mixes a long continued prefill with many short prompts (or long and short decodes) does
    # not pad every chunk to the longest one. Small sizes share one class to keep buckets few.
    query_class = 0 if query_len == 1 else max((query_len - 1).bit_length(), 4)
    return query_class, max((context_blocks - 1).bit_length(), 3)


# Most blocks (sequences x padded blocks) one bucket gathers per layer for K and again for V.
# 64 decodes x ~30 blocks gathered at once spill the CPU caches, and the gather plus the matmul
# that re-reads the copy then dominate the step. Splitting keeps each gather cache-sized: a
# 64-decode tiny-model step with contexts 48..552 took ~17 ms of CPU split at 256 blocks vs
# ~19-20 ms unsplit (1 thread, busy 2-core box; 128 and 1024 were no better than unsplit).
# None disables splitting.
MAX_BUCKET_BLOCKS: int | None = 256


def _split_bucket(chunks: list[int], context_lens: list[int], block_size: int) -> list[list[int]]:
    limit = MAX_BUCKET_BLOCKS
    if limit is None or len(chunks) < 2:
        return [chunks]
    blocks = [(context_lens[i] + block_size - 1) // block_size for i in chunks]
    if len(chunks) * max(blocks) <= limit:
        return [chunks]
    groups: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for i, n in zip(chunks, blocks, strict=True):
        if current and (len(current) + 1) * max(widest, n) > limit:
            groups.append(current)
            current, widest = [], 0
        current.append(i)
        widest = max(widest, n)
    groups.append(current)
    return groups


def _build_bucket(
    chunks: list[int],
    *,
    query_lens: list[int],
    context_lens: list[int],
    token_offsets: list[int],
    block_tables: torch.Tensor,
    block_size: int,
    query_row_quantum: int,
    key_block_quantum: int,
) -> AttentionBucket:
    device = block_tables.device
    max_query = max(query_lens[i] for i in chunks)
    max_query += -max_query % query_row_quantum
    max_context = max(context_lens[i] for i in chunks)
    num_blocks = (max_context + block_size - 1) // block_size
    num_blocks += -num_blocks % key_block_quantum
    missing = num_blocks - block_tables.shape[1]
    if missing > 0:  # padding key blocks: block id 0 (any valid id), masked below
        block_tables = torch.nn.functional.pad(block_tables, (0, missing))
    columns = torch.tensor(
        [
            [token_offsets[i] for i in chunks],
            [context_lens[i] - query_lens[i] for i in chunks],
            [query_lens[i] for i in chunks],
            [context_lens[i] for i in chunks],
        ],
        dtype=torch.int64,
        device=device,
    )  # (4, B)
    offsets, starts, lens, contexts = columns[:, :, None].unbind(0)  # each (B, 1)
    query_index = torch.arange(max_query, device=device)[None, :]  # (1, Q)
    key_positions = torch.arange(num_blocks * block_size, device=device)  # (L,)
    query_valid = query_index < lens  # (B, Q)
    query_positions = starts + query_index  # (B, Q)
    # Causal: a query sees keys at or before its position and inside its context. Padded query
    # rows still see key 0, so their softmax stays finite; their output is discarded.
    allowed = (key_positions <= query_positions[:, :, None]) & (
        key_positions < contexts[:, :, None]
    )  # (B, Q, L)
    bias = torch.zeros(allowed.shape, dtype=torch.float32, device=device)
    all_valid = all(query_lens[i] == max_query for i in chunks)
    chunk_index = torch.tensor(chunks, dtype=torch.int64, device=device)
    return AttentionBucket(
        token_index=offsets + torch.where(query_valid, query_index, 0),
        query_valid=None if all_valid else query_valid,
        block_tables=block_tables[chunk_index, :num_blocks],
        bias=bias.masked_fill_(~allowed, float("-inf")),
    )


def build_attention_metadata(
    *,
    query_lens: list[int],
    context_lens: list[int],
    block_tables: torch.Tensor,
    block_size: int,
    query_row_quantum: int | None = None,
) -> AttentionMetadata:
    """query_lens, context_lens: one entry per chunk; context_len = tokens cached after this
    step. block_tables: (num_chunks, max_blocks) long on the pool's device, padded with any
    valid block id. query_row_quantum: batch-invariant attention, each bucket's query rows
    padded to a multiple of it (None: the default kernel)."""
    device = block_tables.device
    num_chunks = len(query_lens)
    num_tokens = sum(query_lens)
    invariant = query_row_quantum is not None
    token_offsets = list(accumulate(query_lens, initial=0))[:-1]
    buckets: dict[tuple[int, int], list[int]] = {}
    for i in range(num_chunks):
        context_blocks = (context_lens[i] + block_size - 1) // block_size
        buckets.setdefault(_bucket_key(query_lens[i], context_blocks), []).append(i)
    groups = [
        group
        for chunks in buckets.values()
        for group in _split_bucket(chunks, context_lens, block_size)
    ]

    lens = torch.tensor([query_lens, context_lens], dtype=torch.int64, device=device)
    query_lens_t, context_lens_t = lens.unbind(0)
    chunk_of_token = torch.repeat_interleave(
        torch.arange(num_chunks, device=device), query_lens_t, output_size=num_tokens
    )
    # position = token's flat index - its chunk's first flat index + its chunk's first position
    shift = torch.cumsum(query_lens_t, 0) - query_lens_t - (context_lens_t - query_lens_t)
    positions = torch.arange(num_tokens, device=device) - shift[chunk_of_token]  # (T,)
    slot_mapping = (
        block_tables[chunk_of_token, positions // block_size] * block_size + positions % block_size
    )  # (T,)
    return AttentionMetadata(
        num_tokens=num_tokens,
        positions=positions,
        slot_mapping=slot_mapping,
        buckets=tuple(
            _build_bucket(
                chunks,
                query_lens=query_lens,
                context_lens=context_lens,
                token_offsets=token_offsets,
                block_tables=block_tables,
                block_size=block_size,
                query_row_quantum=query_row_quantum or 1,
                key_block_quantum=key_blocks_per_reduction(block_size) if invariant else 1,
            )
            for chunks in groups
        ),
        batch_invariant=invariant,
    )


def _gather_blocks(pool: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """pool (kv_heads, num_blocks, block_size, head_dim); block_tables (B, n).
    Returns (kv_heads, B, n * block_size, head_dim)."""
    num_kv_heads, _, block_size, head_dim = pool.shape
    batch, num_blocks = block_tables.shape
    gathered = pool.index_select(1, block_tables.reshape(-1))  # (kv_heads, B*n, bs, head_dim)
    return gathered.view(num_kv_heads, batch, num_blocks * block_size, head_dim)


def _attend(
    query: torch.Tensor,  # (kv_heads, B, group * rows, head_dim), already scaled
    keys: torch.Tensor,  # (kv_heads, B, L, head_dim)
    values: torch.Tensor,  # (kv_heads, B, L, head_dim)
    bias: torch.Tensor,  # (B, rows, L)
    group: int,
) -> torch.Tensor:
    num_kv_heads, batch, num_rows, _ = query.shape
    scores = torch.matmul(query, keys.transpose(-1, -2))  # (kv_heads, B, group*rows, L)
    # Rows are ordered (group, row) so the per-row mask broadcasts over the group without a copy.
    scores = scores.view(num_kv_heads, batch, group, num_rows // group, -1).add_(
        bias[None, :, None]
    )
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(probs.view(num_kv_heads, batch, num_rows, -1), values)


def _attend_bucket(
    query: torch.Tensor,  # (T, heads, head_dim), already scaled
    key_pool: torch.Tensor,  # (kv_heads, num_blocks, block_size, head_dim)
    value_pool: torch.Tensor,
    bucket: AttentionBucket,
    group: int,
    batch_invariant: bool = False,
) -> torch.Tensor:
    """Returns (B, Q, heads, head_dim) for the bucket's padded query rows."""
    num_heads, head_dim = query.shape[1], query.shape[2]
    num_kv_heads = num_heads // group
    batch, max_query = bucket.token_index.shape
    bucket_query = (
        query[bucket.token_index]  # (B, Q, heads, head_dim)
        .view(batch, max_query, num_kv_heads, group, head_dim)
        .permute(2, 0, 3, 1, 4)  # (kv_heads, B, group, Q, head_dim)
        .reshape(num_kv_heads, batch, group * max_query, head_dim)
    )
    attend = _attend
    if batch_invariant:
        block_size = key_pool.shape[2]
        key_block = block_size * key_blocks_per_reduction(block_size)
        attend = partial(invariant_attend, key_block=key_block)
    out = attend(
        bucket_query,
        _gather_blocks(key_pool, bucket.block_tables),
        _gather_blocks(value_pool, bucket.block_tables),
        bucket.bias,
        group,
    )  # (kv_heads, B, group * Q, head_dim)
    return (
        out.view(num_kv_heads, batch, group, max_query, head_dim)
        .permute(1, 3, 0, 2, 4)  # (B, Q, kv_heads, group, head_dim)
        .reshape(batch, max_query, num_heads, head_dim)
    )


def paged_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_layer: torch.Tensor,
    metadata: AttentionMetadata,
    *,
    scale: float,
) -> torch.Tensor:
    """query (T, heads, head_dim); key/value (T, kv_heads, head_dim);
    kv_layer (2, kv_heads, num_blocks, block_size, head_dim), written in place.
    Returns (T, heads, head_dim). Query head h uses kv head h // (heads // kv_heads)."""
    num_tokens, num_heads, head_dim = query.shape
    num_kv_heads = key.shape[1]
    group = num_heads // num_kv_heads
    key_pool, value_pool = kv_layer[0], kv_layer[1]  # (kv_heads, num_blocks, bs, head_dim)
    key_pool.view(num_kv_heads, -1, head_dim)[:, metadata.slot_mapping] = key.transpose(0, 1)
    value_pool.view(num_kv_heads, -1, head_dim)[:, metadata.slot_mapping] = value.transpose(0, 1)
    query = query * scale
    buckets = metadata.buckets
    invariant = metadata.batch_invariant
    if len(buckets) == 1 and buckets[0].query_valid is None:
        # One dense bucket holds every token in flat order: no scatter needed.
        return _attend_bucket(query, key_pool, value_pool, buckets[0], group, invariant).reshape(
            num_tokens, num_heads, head_dim
        )
    output = query.new_empty(num_tokens, num_heads, head_dim)
    for bucket in buckets:
        out = _attend_bucket(query, key_pool, value_pool, bucket, group, invariant)
        if bucket.query_valid is None:
            output[bucket.token_index.flatten()] = out.reshape(-1, num_heads, head_dim)
        else:
            output[bucket.token_index[bucket.query_valid]] = out[bucket.query_valid]
    return output
