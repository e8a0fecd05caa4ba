"""Per-request sampling, thinking and stopping settings (SamplingParams).

It validates values a client sent and names a request's sampling signature (what the
`sampling_alignment: strict` failure preset groups batches by); it does not know the server's
limits (max_model_len, the max_tokens cap), which the engine checks when the request is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from reference_server.errors import RequestValidationError

__all__ = ["MAX_LOGIT_BIAS", "SamplingParams", "SamplingSignature"]

MAX_LOGIT_BIAS = 100.0  # OpenAI's range for logit_bias values: [-100, 100]


class SamplingSignature(NamedTuple):
    """Every setting that changes how a row is sampled, the seed reduced to given-or-not."""

    temperature: float
    top_p: float
    top_k: int
    seeded: bool
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    logit_bias: tuple[tuple[int, float], ...]
    stop: tuple[str, ...]
    thinking: bool
    thinking_tokens: int


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0  # 0 => greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 => off
    seed: int | None = None  # None => the engine assigns one when the request is added
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    # EOS and stop_token_ids cannot be sampled before this many output tokens (vLLM's min_tokens).
    min_tokens: int = 0
    deadline_seconds: float | None = None  # wall-time budget counted from arrival
    # Penalties, as vLLM applies them before temperature: presence and frequency over the output
    # tokens so far, repetition over prompt and output (> 1 discourages, 1 = off).
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # (token id, bias) pairs added to the logits before sampling (OpenAI's logit_bias).
    logit_bias: tuple[tuple[int, float], ...] = ()
    # Thinking mode: the first min(thinking_tokens, max_tokens) output tokens are reasoning
    # (streamed as reasoning_content); `thinking` False requires thinking_tokens == 0.
    thinking: bool = False
    thinking_tokens: int = 0

    def __post_init__(self) -> None:
        # Lists are accepted for convenience (JSON bodies), stored as tuples to stay hashable.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if isinstance(self.logit_bias, dict):
            object.__setattr__(self, "logit_bias", tuple(sorted(self.logit_bias.items())))
        elif isinstance(self.logit_bias, list):
            object.__setattr__(self, "logit_bias", tuple(tuple(p) for p in self.logit_bias))
        self.validate()

    def validate(self) -> None:
        """Raise RequestValidationError naming the first invalid field."""
        _require_int("max_tokens", self.max_tokens, minimum=1)
        _require_number("temperature", self.temperature)
        if self.temperature < 0:
            raise RequestValidationError("temperature", "must be >= 0 (0 means greedy)")
        _require_number("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise RequestValidationError("top_p", "must be in (0, 1]")
        _require_int("top_k", self.top_k, minimum=0)
        if self.seed is not None:
            _require_int("seed", self.seed, minimum=0)
            if self.seed >= 2**63:
                raise RequestValidationError("seed", "must be below 2**63")
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise RequestValidationError("stop", "must be a list of non-empty strings")
        if not isinstance(self.stop_token_ids, tuple):
            raise RequestValidationError("stop_token_ids", "must be a list of token ids")
        for token_id in self.stop_token_ids:
            _require_int("stop_token_ids", token_id, minimum=0)
        if not isinstance(self.ignore_eos, bool):
            raise RequestValidationError("ignore_eos", "must be a boolean")
        _require_int("min_tokens", self.min_tokens, minimum=0)
        if self.min_tokens > self.max_tokens:
            raise RequestValidationError("min_tokens", "must be <= max_tokens")
        if self.deadline_seconds is not None:
            _require_number("deadline_seconds", self.deadline_seconds)
            if self.deadline_seconds <= 0:
                raise RequestValidationError("deadline_seconds", "must be > 0")
        for name in ("presence_penalty", "frequency_penalty"):
            _require_number(name, getattr(self, name))
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise RequestValidationError(name, "must be in [-2, 2]")
        _require_number("repetition_penalty", self.repetition_penalty)
        if not 0 < self.repetition_penalty <= 2.0:
            raise RequestValidationError("repetition_penalty", "must be in (0, 2]")
        self._validate_logit_bias()
        if not isinstance(self.thinking, bool):
            raise RequestValidationError("thinking", "must be a boolean")
        _require_int("thinking_tokens", self.thinking_tokens, minimum=0)
        if self.thinking_tokens and not self.thinking:
            raise RequestValidationError("thinking_tokens", "needs thinking mode turned on")

    def _validate_logit_bias(self) -> None:
        if not isinstance(self.logit_bias, tuple):
            raise RequestValidationError("logit_bias", "must map token ids to numbers")
        seen: set[int] = set()
        for pair in self.logit_bias:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise RequestValidationError("logit_bias", "must map token ids to numbers")
            token_id, bias = pair
            _require_int("logit_bias", token_id, minimum=0)
            _require_number("logit_bias", bias)
            if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                raise RequestValidationError("logit_bias", "values must be in [-100, 100]")
            if token_id in seen:
                raise RequestValidationError("logit_bias", f"token id {token_id} given twice")
            seen.add(token_id)

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def num_thinking_tokens(self) -> int:
        """How many leading output tokens are reasoning (max_tokens bounds both together)."""
        return min(self.thinking_tokens, self.max_tokens) if self.thinking else 0

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )

    def signature(self) -> SamplingSignature:
        """What `sampling_alignment: strict` groups batches by: every setting that changes how a
        row is sampled, with the seed reduced to given-or-not (the engine draws one for the rest,
        so call this before it does)."""
        return SamplingSignature(
            self.temperature,
            self.top_p,
            self.top_k,
            self.seed is not None,
            self.presence_penalty,
            self.frequency_penalty,
            self.repetition_penalty,
            self.logit_bias,
            self.stop,
            self.thinking,
            self.thinking_tokens,
        )


def _require_int(field: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestValidationError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise RequestValidationError(field, f"must be >= {minimum}, got {value}")


def _require_number(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestValidationError(field, f"must be a finite number, got {value!r}")
