"""The paged KV tensor pool: one preallocated tensor for every layer's keys and values, sized
from a memory budget.

It knows tensor shapes and byte sizes; it does not know which sequence owns which block (the
plain-Python BlockManager counts blocks, the model runner passes block tables).
"""

from __future__ import annotations

import torch

from reference_server.model_config import ModelConfig

__all__ = ["DEFAULT_CPU_KV_CACHE_BYTES", "KVCache", "block_bytes", "num_blocks_for_budget"]

DEFAULT_CPU_KV_CACHE_BYTES = 64 * 1024 * 1024


def block_bytes(config: ModelConfig, *, block_size: int, dtype: torch.dtype) -> int:
    """Bytes one block takes across all layers, keys and values."""
    dtype_bytes = torch.empty((), dtype=dtype).element_size()
    return block_size * config.kv_bytes_per_token(dtype_bytes=dtype_bytes)


def num_blocks_for_budget(
    config: ModelConfig, *, block_size: int, dtype: torch.dtype, budget_bytes: int
) -> int:
    per_block = block_bytes(config, block_size=block_size, dtype=dtype)
    num_blocks = budget_bytes // per_block
    if num_blocks < 1:
        raise ValueError(
            f"KV cache budget of {budget_bytes} bytes is smaller than one block "
            f"({per_block} bytes for block_size={block_size})"
        )
    return num_blocks


class KVCache:
    """Owns the pool tensor; layer i's view is kv_layers[i]. Heads come before blocks so that
    gathering a sequence's blocks yields the layout attention multiplies with (attention.py)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Zero-filled: masked keys get probability 0, but 0 * NaN from uninitialised memory in a
        # padded value gather would still poison the output.
        self.kv = torch.zeros(
            (
                config.num_layers,
                2,
                config.num_kv_heads,
                num_blocks,
                block_size,
                config.head_dim,
            ),
            device=device,
            dtype=dtype,
        )  # (num_layers, 2, kv_heads, num_blocks, block_size, head_dim)
        self.kv_layers: list[torch.Tensor] = list(self.kv.unbind(0))

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()
