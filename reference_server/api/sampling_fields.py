"""Typed reads of a completion request's sampling and thinking fields, each failure a 400 that
names the field: top_p, top_k, the penalties, logit_bias (OpenAI's shape) and thinking mode
(`chat_template_kwargs.enable_thinking`, `reasoning_effort`, `thinking_tokens`).

It resolves a request's reasoning length from the server default; it knows nothing about the
other fields of a request (protocol.py) or about the engine.
"""

from __future__ import annotations

from reference_server.api.errors import APIError
from reference_server.api.fields import BodyReader, type_name
from reference_server.sampling_params import MAX_LOGIT_BIAS

__all__ = [
    "MAX_THINKING_TOKENS",
    "MAX_TOP_K",
    "REASONING_EFFORT_FACTORS",
    "read_logit_bias",
    "read_repetition_penalty",
    "read_thinking_tokens",
    "read_top_k",
    "read_top_p",
]

MAX_TOP_K = 2**31 - 1
# reasoning_effort scales --default-thinking-tokens (a request's thinking_tokens wins).
REASONING_EFFORT_FACTORS = {"low": 0.5, "medium": 1.0, "high": 2.0}
MAX_THINKING_TOKENS = 1_000_000


def read_thinking_tokens(reader: BodyReader, default_thinking_tokens: int) -> int | None:
    """The request's reasoning length, or None when thinking mode is off.

    On with chat_template_kwargs.enable_thinking true (Qwen3's switch) or a reasoning_effort
    (OpenAI's); enable_thinking false, or neither, is off. Length: thinking_tokens (a batchgate
    extension) when given, else --default-thinking-tokens scaled by the effort."""
    enable: bool | None = None
    kwargs = reader.obj("chat_template_kwargs")
    # Other template switches are the template's business: accepted, no effect here.
    if kwargs is not None and kwargs.has("enable_thinking"):
        enable = kwargs.boolean("enable_thinking")
    effort = reader.string("reasoning_effort", choices=tuple(REASONING_EFFORT_FACTORS))
    if effort is not None and enable is False:
        raise APIError.invalid(
            "reasoning_effort", "conflicts with chat_template_kwargs.enable_thinking: false"
        )
    requested = reader.integer("thinking_tokens", low=0, high=MAX_THINKING_TOKENS)
    on = bool(enable) or effort is not None
    if not on:
        if requested is not None:
            raise APIError.invalid(
                "thinking_tokens",
                "needs thinking mode "
                "(chat_template_kwargs.enable_thinking true, or reasoning_effort)",
            )
        return None
    if requested is not None:
        return int(requested)
    factor = REASONING_EFFORT_FACTORS[effort or "medium"]
    return round(default_thinking_tokens * factor)


def read_repetition_penalty(reader: BodyReader) -> float:
    value = reader.number("repetition_penalty", low=0.0, high=2.0, default=1.0)
    if value <= 0.0:
        raise APIError.invalid("repetition_penalty", "must be > 0 and <= 2")
    return value


def read_logit_bias(reader: BodyReader, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's shape: {"<token id>": bias in [-100, 100]}, keys token ids as strings."""
    raw = reader.raw("logit_bias")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise APIError.invalid("logit_bias", f"must be an object, got {type_name(raw)}")
    pairs: dict[int, float] = {}
    for key, value in raw.items():
        path = f"logit_bias.{key}"
        try:
            token_id = int(key)
        except ValueError:
            raise APIError.invalid(path, "keys must be token ids") from None
        if not 0 <= token_id < vocab_size or str(token_id) != key.strip():
            raise APIError.invalid(path, f"must be a token id in [0, {vocab_size})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise APIError.invalid(path, f"must be a number, got {type_name(value)}")
        if not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS:
            raise APIError.invalid(path, "must be in [-100, 100]")
        pairs[token_id] = float(value)
    return tuple(sorted(pairs.items()))


def read_top_p(reader: BodyReader) -> float:
    value = reader.number("top_p", low=0.0, high=1.0, default=1.0)
    if value <= 0.0:
        raise APIError.invalid("top_p", "must be > 0 and <= 1")
    return value


def read_top_k(reader: BodyReader) -> int:
    value = reader.integer("top_k", low=-1, high=MAX_TOP_K, default=0)
    return 0 if value == -1 else value  # -1 means "off" in vLLM's dialect; 0 in ours
