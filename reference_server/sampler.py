"""The sampler: one vectorized call picks the next token for every sampling row of a step, each
row with its own temperature, top-p, top-k and seed.

Randomness is a pure function of (seed, output position, vocab index): an integer hash gives a
uniform number, which becomes Gumbel noise, and the token is argmax(logits / T + noise) over the
top-k / top-p survivors (the Gumbel-max trick samples exactly from the softmax). So a seeded row
draws the same token whatever else is in the batch and after a preemption recompute. It knows
nothing about sequences or the model; the runner passes plain per-row tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SamplingTensors", "sample", "shared_generator_noise", "uniform_noise"]

_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class SamplingTensors:
    """Per-row settings, each of shape (rows,) on the logits' device."""

    temperature: torch.Tensor  # float32; 0 => greedy
    top_p: torch.Tensor  # float32 in (0, 1]
    top_k: torch.Tensor  # int64; 0 => off
    seed_low: torch.Tensor  # int64 in [0, 2**32)
    seed_high: torch.Tensor  # int64 in [0, 2**32)
    output_position: torch.Tensor  # int64: index of the output token being drawn

    @classmethod
    def from_lists(
        cls,
        *,
        temperature: list[float],
        top_p: list[float],
        top_k: list[int],
        seed: list[int],
        output_position: list[int],
        device: torch.device,
    ) -> SamplingTensors:
        seeds = [s % (1 << 64) for s in seed]  # negative or huge Python ints wrap to 64 bits
        return cls(
            temperature=torch.tensor(temperature, dtype=torch.float32, device=device),
            top_p=torch.tensor(top_p, dtype=torch.float32, device=device),
            top_k=torch.tensor(top_k, dtype=torch.int64, device=device),
            seed_low=torch.tensor([s & _MASK32 for s in seeds], dtype=torch.int64, device=device),
            seed_high=torch.tensor([s >> 32 for s in seeds], dtype=torch.int64, device=device),
            output_position=torch.tensor(output_position, dtype=torch.int64, device=device),
        )


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche hash on int64 tensors holding values in [0, 2**32).
    Multipliers stay below 2**31 so no product overflows int64 on any backend."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _MASK32
    return x ^ (x >> 16)


def uniform_noise(
    seed_low: torch.Tensor, seed_high: torch.Tensor, position: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """(rows, vocab) uniforms in (0, 1), a pure function of (seed, position, vocab index)."""
    row = _mix32(_mix32(_mix32(seed_low) ^ seed_high) ^ (position & _MASK32))  # (rows,)
    vocab = torch.arange(vocab_size, device=row.device, dtype=torch.int64)
    bits = _mix32((_mix32(row[:, None] ^ vocab[None, :]) + 0x9E3779B9) & _MASK32)  # (rows, V)
    # 24 bits fit a float32 mantissa exactly; +0.5 keeps both 0 and 1 out of the range.
    return ((bits >> 8).to(torch.float32) + 0.5) / float(1 << 24)


def _filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor):  # type: ignore[no-untyped-def]
    """Sets to -inf every logit outside the row's top-k and top-p nucleus. logits (rows, V)."""
    vocab_size = logits.shape[-1]
    sorted_logits, sorted_index = torch.sort(logits, dim=-1, descending=True)  # (rows, V)
    rank = torch.arange(vocab_size, device=logits.device)[None, :]
    remove = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    probs = torch.softmax(sorted_logits, dim=-1)
    # A token is cut when the mass strictly before it already reaches top_p; the first always stays.
    mass_before = torch.cumsum(probs, dim=-1) - probs
    # top_p == 1 must cut nothing, even where float rounding makes the mass reach 1.0.
    remove = (mass_before >= top_p[:, None]) & (top_p[:, None] < 1.0)
    remove[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, sorted_index, sorted_logits)


def shared_generator_noise(
    is_random: torch.Tensor, vocab_size: int, generator_seed: int
) -> torch.Tensor:
    """The `shared_sampler_seed` failure preset: (rows, vocab) uniforms in (0, 1) drawn from ONE
    generator in row order, so a random row's noise depends on the random rows before it in the
    step (its batch company) instead of on its own seed and position. Greedy rows draw nothing."""
    generator = torch.Generator(device="cpu").manual_seed(generator_seed)
    num_random = int(is_random.sum())
    draws = torch.rand((num_random, vocab_size), generator=generator)
    uniform = torch.full((is_random.shape[0], vocab_size), 0.5)
    uniform[is_random.cpu()] = draws
    # rand's 24-bit grid is [0, 1): half a step up keeps 0 out, as uniform_noise does.
    return (uniform + 0.5 / float(1 << 24)).to(is_random.device)


def sample(
    logits: torch.Tensor, params: SamplingTensors, *, shared_generator_seed: int | None = None
) -> torch.Tensor:
    """logits (rows, vocab) float32, already masked (-inf) where a token is forbidden.
    Returns (rows,) int64 token ids. `shared_generator_seed` (a failure preset, see
    shared_generator_noise) replaces the per-row noise with one generator's draws."""
    greedy_tokens = torch.argmax(logits, dim=-1)
    is_greedy = params.temperature <= 0
    if bool(is_greedy.all()):
        return greedy_tokens
    temperature = torch.where(is_greedy, 1.0, params.temperature)[:, None]
    scaled = logits / temperature
    if bool(((params.top_k > 0) | (params.top_p < 1.0)).any()):
        scaled = _filter_top_k_top_p(scaled, params.top_k, params.top_p)
    if shared_generator_seed is not None:
        uniform = shared_generator_noise(~is_greedy, logits.shape[-1], shared_generator_seed)
    else:
        uniform = uniform_noise(
            params.seed_low, params.seed_high, params.output_position, logits.shape[-1]
        )
    gumbel = -torch.log(-torch.log(uniform))
    sampled_tokens = torch.argmax(scaled + gumbel, dim=-1)
    return torch.where(is_greedy, greedy_tokens, sampled_tokens)
