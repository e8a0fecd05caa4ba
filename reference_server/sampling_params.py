"""Per-request sampling and stopping settings (SamplingParams).

It validates values a client sent; it does not know the server's limits (max_model_len, the
max_tokens cap), which the engine checks when the request is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reference_server.errors import RequestValidationError

__all__ = ["SamplingParams"]


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

    def __post_init__(self) -> None:
        # Lists are accepted for convenience (JSON bodies), stored as tuples to stay hashable.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif isinstance(self.stop, list):
            object.__setattr__(self, "stop", tuple(self.stop))
        if isinstance(self.stop_token_ids, list):
            object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
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

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


def _require_int(field: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestValidationError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise RequestValidationError(field, f"must be >= {minimum}, got {value}")


def _require_number(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestValidationError(field, f"must be a finite number, got {value!r}")
