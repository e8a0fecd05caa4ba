"""Paged attention through block tables equals dense causal attention."""

from __future__ import annotations

import random

import pytest
import torch

from reference_server.attention import build_attention_metadata, paged_attention


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    # On a shared, oversubscribed CPU box torch's two OpenMP threads stall at every barrier
    # (measured: this module ran 2.6x slower and burned 2.4x the CPU); restored afterwards.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _dense_causal(q, k, v, start: int, scale: float) -> torch.Tensor:
    """q (n, heads, d) at positions [start, start+n); k/v (start+n, kv_heads, d)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # (heads, L, d)
    v = v.repeat_interleave(group, dim=1).transpose(0, 1)
    scores = q.transpose(0, 1) @ k.transpose(1, 2) * scale  # (heads, n, L)
    query_pos = torch.arange(start, start + q.shape[0])[:, None]
    allowed = torch.arange(k.shape[1])[None, :] <= query_pos
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(0, 1)  # (n, heads, d)


def _run_case(rng: random.Random, device: str, dtype: torch.dtype) -> float:
    block_size = rng.choice([1, 2, 3, 4, 8, 16])
    num_kv_heads = rng.choice([1, 2])
    num_heads = num_kv_heads * rng.choice([1, 2, 4])
    head_dim = rng.choice([4, 8])
    num_chunks = rng.randint(1, 6)
    # Each chunk: (tokens already cached, new tokens). Mix decodes (1 new), fresh prefills
    # (0 cached) and prefill chunks continuing an existing cache.
    shapes = []
    for _ in range(num_chunks):
        kind = rng.choice(["decode", "prefill", "continue"])
        cached = 0 if kind == "prefill" else rng.randint(1, 40)
        new = 1 if kind == "decode" else rng.randint(1, 30)
        shapes.append((cached, new))
    blocks_needed = [(c + n + block_size - 1) // block_size for c, n in shapes]
    num_blocks = sum(blocks_needed) + rng.randint(0, 5)
    physical = list(range(num_blocks))
    rng.shuffle(physical)
    tables, cursor = [], 0
    for count in blocks_needed:
        tables.append(physical[cursor : cursor + count])
        cursor += count

    gen = torch.Generator().manual_seed(rng.randint(0, 2**31))
    kv_layer = torch.randn(2, num_kv_heads, num_blocks, block_size, head_dim, generator=gen)
    flat_k = kv_layer[0].view(num_kv_heads, -1, head_dim)
    flat_v = kv_layer[1].view(num_kv_heads, -1, head_dim)
    full_k, full_v, queries, new_k, new_v = [], [], [], [], []
    for (cached, new), table in zip(shapes, tables, strict=True):
        total = cached + new
        k = torch.randn(total, num_kv_heads, head_dim, generator=gen)
        v = torch.randn(total, num_kv_heads, head_dim, generator=gen)
        slots = torch.tensor(
            [table[p // block_size] * block_size + p % block_size for p in range(cached)],
            dtype=torch.int64,
        )
        flat_k[:, slots] = k[:cached].transpose(0, 1)  # the existing cache
        flat_v[:, slots] = v[:cached].transpose(0, 1)
        full_k.append(k)
        full_v.append(v)
        queries.append(torch.randn(new, num_heads, head_dim, generator=gen))
        new_k.append(k[cached:])
        new_v.append(v[cached:])

    max_blocks = max(len(t) for t in tables)
    metadata = build_attention_metadata(
        query_lens=[n for _, n in shapes],
        context_lens=[c + n for c, n in shapes],
        block_tables=torch.tensor([t + [0] * (max_blocks - len(t)) for t in tables], device=device),
        block_size=block_size,
    )
    scale = head_dim**-0.5
    kv_device = kv_layer.to(device=device, dtype=dtype)
    out = (
        paged_attention(
            torch.cat(queries).to(device=device, dtype=dtype),
            torch.cat(new_k).to(device=device, dtype=dtype),
            torch.cat(new_v).to(device=device, dtype=dtype),
            kv_device,
            metadata,
            scale=scale,
        )
        .float()
        .cpu()
    )
    expected = torch.cat(
        [
            _dense_causal(q, k, v, cached, scale)
            for q, k, v, (cached, _) in zip(queries, full_k, full_v, shapes, strict=True)
        ]
    )
    # The new K/V landed in the pool where the block tables say.
    for k, (cached, new), table in zip(full_k, shapes, tables, strict=True):
        for p in range(cached, cached + new):
            slot_k = kv_device[0, :, table[p // block_size], p % block_size].float().cpu()
            assert torch.allclose(slot_k, k[p].to(dtype).float())
    return float((out - expected).abs().max())


@pytest.mark.parametrize("case_seed", range(40))
def test_paged_attention_matches_dense_causal_attention_on_cpu(case_seed: int) -> None:
    error = _run_case(random.Random(case_seed), "cpu", torch.float32)
    assert error < 1e-5


def test_metadata_positions_and_slots_follow_block_tables() -> None:
    metadata = build_attention_metadata(
        query_lens=[3, 1],
        context_lens=[5, 7],
        block_tables=torch.tensor([[4, 2], [1, 0]]),
        block_size=4,
    )
    assert metadata.positions.tolist() == [2, 3, 4, 6]
    # seq 0: positions 2,3 in block 4, position 4 in block 2; seq 1: position 6 in block 0.
    assert metadata.slot_mapping.tolist() == [18, 19, 8, 2]
    prefill, decode = metadata.buckets
    assert prefill.token_index.tolist() == [[0, 1, 2]]
    assert decode.token_index.tolist() == [[3]]
    assert decode.block_tables.tolist() == [[1, 0]]
    # The decode at position 6 sees keys 0..6 of its 8 gathered slots.
    assert decode.bias[0, 0].isinf().tolist() == [False] * 7 + [True]


def test_buckets_keep_padding_bounded_when_lengths_differ_widely() -> None:
    # 40 short prompts next to one long continued prefill, and long and short decodes.
    query_lens = [5] * 40 + [300] + [1] * 10
    context_lens = [5] * 40 + [1500] + [20] * 5 + [1000] * 5
    num_blocks = [(c + 15) // 16 for c in context_lens]
    tables = torch.zeros(len(query_lens), max(num_blocks), dtype=torch.int64)
    metadata = build_attention_metadata(
        query_lens=query_lens, context_lens=context_lens, block_tables=tables, block_size=16
    )
    padded = sum(b.bias.numel() for b in metadata.buckets)
    exact = sum(q * c for q, c in zip(query_lens, context_lens, strict=True))
    assert padded <= 4 * exact
    covered = torch.cat(
        [
            b.token_index.flatten() if b.query_valid is None else b.token_index[b.query_valid]
            for b in metadata.buckets
        ]
    )
    assert sorted(covered.tolist()) == list(range(sum(query_lens)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("case_seed", range(10))
def test_paged_attention_matches_dense_causal_attention_on_cuda(case_seed: int) -> None:
    error = _run_case(random.Random(case_seed), "cuda", torch.bfloat16)
    assert error < 5e-2
