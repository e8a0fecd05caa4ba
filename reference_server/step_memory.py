"""How much memory one engine step may need, and whether a token budget fits what is free.

Why: `max_num_batched_tokens` sizes every step's activations (MLP, logits, attention scores), so
a budget raised live to 10^9 through /admin/batching let one 42k-token step take 4.4 s and 0.8 GB
more RSS; on CUDA the start-up reserve covered only the start-up budget. The estimate is an
upper bound in float32 (the largest temporaries); it is checked at start-up on CPU and on every
change of the budget, and a budget that does not fit is refused with the figures.

It owns the estimate and the check; the runner supplies its model shape and device.
"""

from __future__ import annotations

from typing import Any

from reference_server.errors import ConfigError

__all__ = ["CPU_MEMORY_SHARE", "check_step_memory", "step_activation_bytes"]

# On CPU a step may use at most this share of the memory the OS reports available: the rest is
# for the KV pool growth of other processes, the load generator and the page cache.
CPU_MEMORY_SHARE = 0.5
# On CUDA, of the device memory free now, what a larger budget may add beyond the reserve made
# at start-up (fragmentation and the allocator's own blocks take the rest).
CUDA_FREE_SHARE = 0.9


def step_activation_bytes(model_config: Any, *, tokens: int, max_model_len: int) -> int:
    """Upper bound of one step's activation bytes for `tokens` tokens."""
    per_token = 3 * model_config.intermediate_size + 8 * model_config.hidden_size
    per_token += model_config.vocab_size + 4 * model_config.num_heads * max_model_len
    return tokens * per_token * 4


def check_step_memory(
    model_config: Any,
    *,
    device: str,
    max_model_len: int,
    tokens: int,
    reserved_tokens: int,
    free_bytes: int,
) -> None:
    """Raise ConfigError("max_num_batched_tokens", …) when a step of `tokens` tokens would not
    fit. `reserved_tokens`: the budget the start-up memory plan already covers (CUDA);
    `free_bytes`: memory free now (device memory on CUDA, available RAM on CPU)."""
    need = step_activation_bytes(model_config, tokens=tokens, max_model_len=max_model_len)
    if device == "cuda":
        reserved = step_activation_bytes(
            model_config, tokens=reserved_tokens, max_model_len=max_model_len
        )
        limit = reserved + int(free_bytes * CUDA_FREE_SHARE)
        where = f"the start-up reserve for {reserved_tokens} tokens + {CUDA_FREE_SHARE:.0%} of "
        where += f"the {_mib(free_bytes)} device memory free now"
    else:
        limit = int(free_bytes * CPU_MEMORY_SHARE)
        where = f"{CPU_MEMORY_SHARE:.0%} of the {_mib(free_bytes)} of memory available"
    if need > limit:
        largest = max(0, tokens * limit // need)
        raise ConfigError(
            "max_num_batched_tokens",
            f"{tokens} tokens per step would need up to {_mib(need)} of activations, more than "
            f"{where} ({_mib(limit)}); at most about {largest} fit",
        )


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"
