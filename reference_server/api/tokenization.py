"""The bodies of vLLM's `POST /tokenize` and `POST /detokenize`, parsed and answered.

Owns the two request shapes - `{"prompt": str}` or `{"messages": [...]}` in, `{"tokens", "count",
"max_model_len"}` out; `{"tokens": [...]}` in, `{"prompt": str}` out - using the server's own
tokenizer and chat template, so `/tokenize` of a chat request's messages gives exactly the
tokens /v1/chat/completions counts as `prompt_tokens`. Unknown fields follow the request's
`UnknownFields` policy. It knows nothing about HTTP routing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_server.api.errors import APIError
from reference_server.api.fields import BodyReader, UnknownFields, is_token_id, type_name
from reference_server.api.messages import read_messages
from reference_server.tokenizer import ByteTokenizer

__all__ = [
    "DETOKENIZE_FIELDS",
    "TOKENIZE_CHAT_FIELDS",
    "TOKENIZE_PROMPT_FIELDS",
    "Detokenized",
    "Tokenized",
    "detokenize",
    "tokenize",
]

TOKENIZE_PROMPT_FIELDS = ("model", "prompt", "add_special_tokens")
TOKENIZE_CHAT_FIELDS = ("model", "messages", "add_generation_prompt")
DETOKENIZE_FIELDS = ("model", "tokens")


@dataclass(frozen=True, kw_only=True)
class Tokenized:
    model: str | None
    tokens: list[int]
    ignored_fields: tuple[str, ...] = ()

    def body(self, max_model_len: int) -> dict[str, Any]:
        return {"tokens": self.tokens, "count": len(self.tokens), "max_model_len": max_model_len}


@dataclass(frozen=True, kw_only=True)
class Detokenized:
    model: str | None
    prompt: str
    ignored_fields: tuple[str, ...] = ()

    def body(self) -> dict[str, Any]:
        return {"prompt": self.prompt}


def tokenize(body: Any, *, tokenizer: ByteTokenizer, max_messages: int, strict: bool) -> Tokenized:
    reader = BodyReader(body)
    unknown = UnknownFields(strict=strict)
    if reader.has("messages"):
        unknown.check(reader, TOKENIZE_CHAT_FIELDS)
        messages = read_messages(reader, max_messages, unknown)
        tokens = tokenizer.apply_chat_template(messages)
        if not reader.boolean("add_generation_prompt", default=True):
            tokens = tokens[:-1]  # the template ends with the assistant marker that prompts a reply
    else:
        unknown.check(reader, TOKENIZE_PROMPT_FIELDS)
        prompt = reader.raw("prompt")
        if prompt is None:
            raise APIError.invalid(
                "prompt", "is required (or give messages)", code="missing_required_parameter"
            )
        if not isinstance(prompt, str):
            raise APIError.invalid("prompt", f"must be a string, got {type_name(prompt)}")
        add_bos = reader.boolean("add_special_tokens", default=True)
        tokens = tokenizer.encode(prompt, add_bos=add_bos)
    return Tokenized(
        model=reader.string("model"), tokens=tokens, ignored_fields=tuple(unknown.ignored)
    )


def detokenize(body: Any, *, tokenizer: ByteTokenizer, strict: bool) -> Detokenized:
    reader = BodyReader(body)
    unknown = UnknownFields(strict=strict)
    unknown.check(reader, DETOKENIZE_FIELDS)
    raw = reader.raw("tokens")
    if raw is None:
        raise APIError.invalid("tokens", "is required", code="missing_required_parameter")
    if not isinstance(raw, list):
        raise APIError.invalid("tokens", f"must be an array of token ids, got {type_name(raw)}")
    for index, token in enumerate(raw):
        if not is_token_id(token) or not 0 <= token < tokenizer.vocab_size:
            raise APIError.invalid(
                f"tokens[{index}]", f"must be a token id in [0, {tokenizer.vocab_size})"
            )
    return Detokenized(
        model=reader.string("model"),
        prompt=tokenizer.decode(raw),
        ignored_fields=tuple(unknown.ignored),
    )
