"""The OpenAI request shapes this server accepts, parsed into engine-ready values.

Owns the field lists of /v1/chat/completions, /v1/completions and /v1/embeddings, the model-level
limits checked before admission (context length, max_tokens cap, n == 1, sampling ranges, stop
list size, priority class) and tokenization of prompts. Fields it does not know are refused
(`strict=True`, OpenAI's behaviour) or collected in `ignored_fields` for one log line (vLLM's
behaviour); fields it knows are always checked strictly. Every refusal is an `APIError` 400 that
names the field. It knows nothing about HTTP transport, streaming or the engine's queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_server.api.errors import APIError
from reference_server.api.fields import BodyReader, UnknownFields, is_token_id, type_name
from reference_server.api.messages import read_messages
from reference_server.api.sampling_fields import (
    read_logit_bias,
    read_repetition_penalty,
    read_thinking_tokens,
    read_top_k,
    read_top_p,
)
from reference_server.sampling_params import SamplingParams
from reference_server.tokenizer import ByteTokenizer

__all__ = [
    "CHAT_FIELDS",
    "COMPLETION_FIELDS",
    "EMBEDDING_FIELDS",
    "MAX_STOP_TOKEN_IDS",
    "PRIORITIES",
    "STREAM_OPTION_FIELDS",
    "EmbeddingRequest",
    "GenerationRequest",
    "RequestLimits",
    "parse_chat_request",
    "parse_completion_request",
    "parse_embedding_request",
]

PRIORITIES = ("interactive", "batch")
MAX_SEED = 2**63 - 1
# Fewer than the 256 byte tokens, so min_tokens can never mask every token of a row.
MAX_STOP_TOKEN_IDS = 64

_COMMON_FIELDS = (
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
    "stop", "stop_token_ids", "n", "stream", "stream_options", "ignore_eos", "priority", "user",
    "presence_penalty", "frequency_penalty", "logit_bias", "min_tokens", "repetition_penalty",
    "min_p", "metadata", "store", "service_tier", "include_stop_str_in_output",
    "skip_special_tokens",
)  # fmt: skip
CHAT_FIELDS = (
    *_COMMON_FIELDS, "messages", "logprobs", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "response_format",
    "chat_template_kwargs", "reasoning_effort", "thinking_tokens",
)  # fmt: skip

COMPLETION_FIELDS = (*_COMMON_FIELDS, "prompt", "logprobs", "echo", "suffix", "best_of")
EMBEDDING_FIELDS = ("model", "input", "encoding_format", "dimensions", "user")
STREAM_OPTION_FIELDS = ("include_usage", "continuous_usage_stats")


@dataclass(frozen=True, kw_only=True)
class RequestLimits:
    """Server-wide bounds every request is checked against before it reaches the engine."""

    max_model_len: int
    max_tokens_cap: int
    vocab_size: int
    default_max_tokens: int
    max_stop_sequences: int
    max_stop_sequence_chars: int
    max_messages: int
    request_timeout_seconds: float
    embedding_max_inputs_per_request: int
    default_thinking_tokens: int = 32


@dataclass(frozen=True, kw_only=True)
class GenerationRequest:
    endpoint: str  # "chat" | "completions"
    model: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    priority: str
    # vLLM's stream_options.continuous_usage_stats (honoured with include_usage, as vLLM does):
    # every streamed chunk carries the cumulative usage.
    continuous_usage: bool = False
    ignored_fields: tuple[str, ...] = ()  # unknown fields accepted and ignored (not strict)


@dataclass(frozen=True, kw_only=True)
class EmbeddingRequest:
    model: str | None
    inputs: list[list[int]]
    encoding_format: str  # "float" | "base64"
    ignored_fields: tuple[str, ...] = ()


def parse_chat_request(
    body: Any,
    *,
    tokenizer: ByteTokenizer,
    limits: RequestLimits,
    header_priority: str | None,
    strict: bool = True,
) -> GenerationRequest:
    reader = BodyReader(body)
    unknown = UnknownFields(strict=strict)
    unknown.check(reader, CHAT_FIELDS)
    _refuse_unsupported_common(reader)
    reader.unsupported("logprobs", allowed=(False,), why="logprobs are not supported")
    reader.unsupported("top_logprobs", allowed=(0,), why="logprobs are not supported")
    reader.unsupported("tools", allowed=([],), why="tool calling is not supported")
    reader.unsupported("tool_choice", allowed=("none",), why="tool calling is not supported")
    reader.unsupported("functions", allowed=([],), why="function calling is not supported")
    reader.unsupported("function_call", allowed=("none",), why="function calling is not supported")
    response_format = reader.obj("response_format")
    if response_format is not None and response_format.raw("type") != "text":
        raise APIError.invalid(
            "response_format.type", "only 'text' is supported", code="unsupported_parameter"
        )
    thinking_tokens = read_thinking_tokens(reader, limits.default_thinking_tokens)
    messages = read_messages(reader, limits.max_messages, unknown)
    prompt = tokenizer.apply_chat_template(messages)
    return _finish(
        reader, unknown, "chat", prompt, "messages", limits, header_priority, thinking_tokens
    )


def parse_completion_request(
    body: Any,
    *,
    tokenizer: ByteTokenizer,
    limits: RequestLimits,
    header_priority: str | None,
    strict: bool = True,
) -> GenerationRequest:
    reader = BodyReader(body)
    unknown = UnknownFields(strict=strict)
    unknown.check(reader, COMPLETION_FIELDS)
    _refuse_unsupported_common(reader)
    reader.unsupported("logprobs", allowed=(0,), why="logprobs are not supported")
    reader.unsupported("echo", allowed=(False,), why="echo is not supported")
    reader.unsupported("suffix", allowed=("",), why="suffix is not supported")
    reader.integer("best_of", low=1, high=1)
    prompt = _read_prompt(reader.raw("prompt"), tokenizer, limits)
    return _finish(reader, unknown, "completions", prompt, "prompt", limits, header_priority)


def parse_embedding_request(
    body: Any, *, tokenizer: ByteTokenizer, limits: RequestLimits, strict: bool = True
) -> EmbeddingRequest:
    reader = BodyReader(body)
    unknown = UnknownFields(strict=strict)
    unknown.check(reader, EMBEDDING_FIELDS)
    model = reader.string("model")
    encoding_format = reader.string("encoding_format", choices=("float", "base64"), default="float")
    reader.unsupported("dimensions", allowed=(), why="dimensions is not supported")
    raw = reader.raw("input")
    if raw is None:
        raise APIError.invalid("input", "is required", code="missing_required_parameter")
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif isinstance(raw, list) and raw and all(is_token_id(x) for x in raw):
        items = [raw]  # one pre-tokenized input
    elif isinstance(raw, list):
        items = raw
    else:
        raise APIError.invalid("input", f"must be a string or an array, got {type_name(raw)}")
    if not items:
        raise APIError.invalid("input", "must not be empty")
    if len(items) > limits.embedding_max_inputs_per_request:
        raise APIError.invalid(
            "input", f"at most {limits.embedding_max_inputs_per_request} inputs per request"
        )
    inputs: list[list[int]] = []
    for index, item in enumerate(items):
        path = f"input[{index}]"
        if isinstance(item, str):
            if not item:
                raise APIError.invalid(path, "must not be empty")
            ids = tokenizer.encode(item, add_bos=True)
        else:
            ids = _read_token_ids(item, path, limits)
        if len(ids) > limits.max_model_len:
            raise APIError.invalid(
                path, f"is {len(ids)} tokens; the model's context is {limits.max_model_len}"
            )
        inputs.append(ids)
    return EmbeddingRequest(
        model=model,
        inputs=inputs,
        encoding_format=encoding_format,
        ignored_fields=tuple(unknown.ignored),
    )


def _refuse_unsupported_common(reader: BodyReader) -> None:
    reader.integer("n", low=1, high=1)  # more than one choice is not implemented
    reader.unsupported("min_p", allowed=(0,), why="min_p is not supported")
    reader.unsupported(
        "include_stop_str_in_output", allowed=(False,), why="stop strings are never echoed"
    )
    reader.unsupported("skip_special_tokens", allowed=(True,), why="special tokens are skipped")
    reader.string("user")
    reader.boolean("store")


def _finish(
    reader: BodyReader,
    unknown: UnknownFields,
    endpoint: str,
    prompt: list[int],
    prompt_field: str,
    limits: RequestLimits,
    header_priority: str | None,
    thinking_tokens: int | None = None,
) -> GenerationRequest:
    model = reader.string("model")
    stream = reader.boolean("stream")
    include_usage = continuous_usage = False
    options = reader.obj("stream_options")
    if options is not None:
        unknown.check(options, STREAM_OPTION_FIELDS)
        include_usage = options.boolean("include_usage")
        # As vLLM: per-chunk usage only when the usage chunk itself was asked for.
        continuous_usage = options.boolean("continuous_usage_stats") and include_usage
    if reader.raw("stream_options") and not stream:
        # As OpenAI and vLLM: options of a stream that is not one were a client's mistake (the
        # usage it asked for would silently not come in the form it expects).
        raise APIError.invalid("stream_options", "can only be given when stream is true")
    room = limits.max_model_len - len(prompt)
    if room < 1:
        raise APIError.invalid(
            prompt_field,
            f"is {len(prompt)} tokens; the model's context is {limits.max_model_len} tokens "
            "and at least one must be left for the completion",
            code="context_length_exceeded",
        )
    requested_max_tokens, max_tokens_field = _requested_max_tokens(reader)
    ignore_eos = reader.boolean("ignore_eos")
    min_tokens = reader.integer("min_tokens", low=0, default=0)
    if requested_max_tokens is None:
        # A min_tokens above the server default raises the default, as far as the limits allow.
        wanted = max(limits.default_max_tokens, min_tokens)
        max_tokens = min(wanted, limits.max_tokens_cap, room)
    else:
        max_tokens = requested_max_tokens
        if max_tokens > limits.max_tokens_cap:
            raise APIError.invalid(
                max_tokens_field, f"must be <= {limits.max_tokens_cap} (the server's cap)"
            )
        if max_tokens > room:
            raise APIError.invalid(
                max_tokens_field,
                f"prompt ({len(prompt)} tokens) + {max_tokens_field} ({max_tokens}) exceeds the "
                f"model's context of {limits.max_model_len} tokens",
                code="context_length_exceeded",
            )
    if min_tokens > max_tokens:
        raise APIError.invalid(
            "min_tokens", f"must be <= max_tokens ({max_tokens}), got {min_tokens}"
        )
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=reader.number("temperature", low=0.0, high=2.0, default=1.0),
        top_p=read_top_p(reader),
        top_k=read_top_k(reader),
        seed=reader.integer("seed", low=0, high=MAX_SEED),
        stop=_read_stop(reader, limits),
        stop_token_ids=_read_stop_token_ids(reader, limits),
        ignore_eos=ignore_eos,
        min_tokens=min_tokens,
        deadline_seconds=limits.request_timeout_seconds,
        presence_penalty=reader.number("presence_penalty", low=-2.0, high=2.0, default=0.0),
        frequency_penalty=reader.number("frequency_penalty", low=-2.0, high=2.0, default=0.0),
        repetition_penalty=read_repetition_penalty(reader),
        logit_bias=read_logit_bias(reader, limits.vocab_size),
        thinking=thinking_tokens is not None,
        thinking_tokens=thinking_tokens or 0,
    )
    params.validate()
    return GenerationRequest(
        endpoint=endpoint,
        model=model,
        prompt_token_ids=prompt,
        params=params,
        stream=stream,
        include_usage=include_usage,
        priority=_priority(reader, header_priority),
        continuous_usage=continuous_usage,
        ignored_fields=tuple(unknown.ignored),
    )


def _requested_max_tokens(reader: BodyReader) -> tuple[int | None, str]:
    """(the requested output cap or None, the field it came from); both fields must agree."""
    max_tokens = reader.integer("max_tokens", low=1)
    max_completion_tokens = reader.integer("max_completion_tokens", low=1)
    both = max_tokens is not None and max_completion_tokens is not None
    if both and max_tokens != max_completion_tokens:
        raise APIError.invalid("max_completion_tokens", "conflicts with max_tokens; give only one")
    if max_completion_tokens is not None:
        return max_completion_tokens, "max_completion_tokens"
    return max_tokens, "max_tokens"


def _priority(reader: BodyReader, header_priority: str | None) -> str:
    raw = reader.raw("priority")
    if is_token_id(raw):
        # vLLM's integer priority: lower value = served first. <= 0 is interactive, > 0 batch.
        return "interactive" if raw <= 0 else "batch"
    if raw is not None:
        if not isinstance(raw, str):
            raise APIError.invalid(
                "priority",
                f"must be an integer or one of {', '.join(PRIORITIES)}, got {type_name(raw)}",
            )
        return reader.string("priority", choices=PRIORITIES)
    if header_priority is not None:
        value = header_priority.strip().lower()
        if value not in PRIORITIES:
            raise APIError.invalid("X-Priority", f"must be one of {', '.join(PRIORITIES)}")
        return value
    return "interactive"


def _read_stop(reader: BodyReader, limits: RequestLimits) -> tuple[str, ...]:
    raw = reader.raw("stop")
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list):
        raise APIError.invalid("stop", f"must be a string or an array, got {type_name(raw)}")
    if len(items) > limits.max_stop_sequences:
        raise APIError.invalid("stop", f"at most {limits.max_stop_sequences} stop sequences")
    for index, item in enumerate(items):
        path = f"stop[{index}]" if isinstance(raw, list) else "stop"
        if not isinstance(item, str):
            raise APIError.invalid(path, f"must be a string, got {type_name(item)}")
        if not item:
            raise APIError.invalid(path, "must not be empty")
        if len(item) > limits.max_stop_sequence_chars:
            raise APIError.invalid(
                path, f"is longer than {limits.max_stop_sequence_chars} characters"
            )
    return tuple(items)


def _read_stop_token_ids(reader: BodyReader, limits: RequestLimits) -> tuple[int, ...]:
    raw = reader.raw("stop_token_ids")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise APIError.invalid(
            "stop_token_ids", f"must be an array of token ids, got {type_name(raw)}"
        )
    if len(raw) > MAX_STOP_TOKEN_IDS:
        raise APIError.invalid("stop_token_ids", f"at most {MAX_STOP_TOKEN_IDS} token ids")
    for index, token in enumerate(raw):
        if not is_token_id(token) or not 0 <= token < limits.vocab_size:
            raise APIError.invalid(
                f"stop_token_ids[{index}]", f"must be a token id in [0, {limits.vocab_size})"
            )
    return tuple(raw)


def _read_token_ids(raw: Any, path: str, limits: RequestLimits) -> list[int]:
    if not isinstance(raw, list) or not raw:
        raise APIError.invalid(path, "must be a non-empty string or array of token ids")
    for index, token in enumerate(raw):
        if not is_token_id(token) or not 0 <= token < limits.vocab_size:
            raise APIError.invalid(
                f"{path}[{index}]", f"must be a token id in [0, {limits.vocab_size})"
            )
    return list(raw)


def _read_prompt(raw: Any, tokenizer: ByteTokenizer, limits: RequestLimits) -> list[int]:
    if raw is None:
        raise APIError.invalid("prompt", "is required", code="missing_required_parameter")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str | list):
        raw = raw[0]  # a batch of one prompt
    elif isinstance(raw, list) and raw and not all(is_token_id(x) for x in raw):
        raise APIError.invalid("prompt", "only one prompt per request is supported")
    if isinstance(raw, str):
        return tokenizer.encode(raw, add_bos=True)
    if isinstance(raw, list):
        return _read_token_ids(raw, "prompt", limits)
    raise APIError.invalid("prompt", f"must be a string or an array, got {type_name(raw)}")
