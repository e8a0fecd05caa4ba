"""The OpenAPI 3.1 document served at `GET /openapi.json`.

The app is plain Starlette (no FastAPI), so the document is built here, from the same field
lists protocol.py and tokenize.py accept: a field added there without a schema here still
appears (as "any value"), and a test checks every accepted field is listed. Request bodies allow
additional properties unless the server runs with --strict. It knows nothing about handlers.
"""

from __future__ import annotations

from typing import Any

from reference_server.api.batch.openapi_paths import batch_paths, batch_schemas
from reference_server.api.protocol import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    EMBEDDING_FIELDS,
    MAX_STOP_TOKEN_IDS,
    PRIORITIES,
    STREAM_OPTION_FIELDS,
)
from reference_server.api.tokenization import (
    DETOKENIZE_FIELDS,
    TOKENIZE_CHAT_FIELDS,
    TOKENIZE_PROMPT_FIELDS,
)

__all__ = ["openapi_document"]

_INT = {"type": "integer"}
_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_TEXT_PART = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["text"],
}
_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant"]},
        "content": {
            "anyOf": [
                {"type": "string"},
                {"type": "array", "items": _TEXT_PART},
                {"type": "null", "description": "assistant messages only"},
            ]
        },
        "name": {"type": "string"},
    },
    "required": ["role"],
}
_FIELD_SCHEMAS: dict[str, dict[str, Any]] = {
    "model": {"type": "string"},
    "messages": {"type": "array", "items": _MESSAGE, "minItems": 1},
    "prompt": {
        "anyOf": [
            {"type": "string"},
            _TOKEN_IDS,
            {"type": "array", "items": {"anyOf": [{"type": "string"}, _TOKEN_IDS]}, "maxItems": 1},
        ]
    },
    "max_tokens": {"type": "integer", "minimum": 1},
    "max_completion_tokens": {"type": "integer", "minimum": 1},
    "min_tokens": {"type": "integer", "minimum": 0},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
    "top_k": {"type": "integer", "minimum": -1},
    "seed": {"type": "integer", "minimum": 0},
    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    "stop_token_ids": {**_TOKEN_IDS, "maxItems": MAX_STOP_TOKEN_IDS},
    "n": {"const": 1},
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {name: {"type": "boolean"} for name in STREAM_OPTION_FIELDS},
    },
    "ignore_eos": {"type": "boolean"},
    "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
    "repetition_penalty": {"type": "number", "exclusiveMinimum": 0, "maximum": 2},
    "logit_bias": {
        "type": "object",
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
        "description": "token id (as a string) -> bias added to its logit",
    },
    "chat_template_kwargs": {
        "type": "object",
        "properties": {"enable_thinking": {"type": "boolean"}},
        "description": "enable_thinking: true turns thinking mode on (Qwen3's switch)",
    },
    "reasoning_effort": {
        "enum": ["low", "medium", "high"],
        "description": "turns thinking mode on; scales the default thinking length x0.5/x1/x2",
    },
    "thinking_tokens": {
        "type": "integer",
        "minimum": 0,
        "description": "batchgate extension: exact reasoning length in tokens (thinking mode)",
    },
    "priority": {
        "anyOf": [{"enum": list(PRIORITIES)}, _INT],
        "description": "a class name, or vLLM's integer: <= 0 is interactive, > 0 is batch",
    },
    "user": {"type": "string"},
    "store": {"type": "boolean"},
    "input": {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"anyOf": [{"type": "string"}, _TOKEN_IDS, _INT]}},
        ]
    },
    "encoding_format": {"enum": ["float", "base64"]},
    "add_special_tokens": {"type": "boolean"},
    "add_generation_prompt": {"type": "boolean"},
    "tokens": _TOKEN_IDS,
}
_REQUIRED = {"messages", "prompt", "input", "tokens"}


def _request_schema(fields: tuple[str, ...], strict: bool) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: _FIELD_SCHEMAS.get(name, {}) for name in fields},
        "required": [name for name in fields if name in _REQUIRED],
        "additionalProperties": not strict,
    }


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _post(summary: str, request: str, *, streams: bool = False) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "OK", **_json({"type": "object"})}
    if streams:
        ok["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, **_json({"$ref": f"#/components/schemas/{request}"})},
            "responses": {
                "200": ok,
                "400": {"description": "invalid request (OpenAI error shape)"},
            },
        }
    }


def _get(summary: str) -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK"}}}}


def openapi_document(*, version: str, strict: bool) -> dict[str, Any]:
    schemas = {
        "ChatCompletionRequest": _request_schema(CHAT_FIELDS, strict),
        "CompletionRequest": _request_schema(COMPLETION_FIELDS, strict),
        "EmbeddingRequest": _request_schema(EMBEDDING_FIELDS, strict),
        "TokenizeRequest": {
            "anyOf": [
                _request_schema(TOKENIZE_PROMPT_FIELDS, strict),
                _request_schema(TOKENIZE_CHAT_FIELDS, strict),
            ]
        },
        "DetokenizeRequest": _request_schema(DETOKENIZE_FIELDS, strict),
        **batch_schemas(strict=strict),
    }
    paths = {
        "/v1/chat/completions": _post(
            "chat completion, streaming or not", "ChatCompletionRequest", streams=True
        ),
        "/v1/completions": _post(
            "text completion, streaming or not", "CompletionRequest", streams=True
        ),
        "/v1/embeddings": _post("embeddings", "EmbeddingRequest"),
        "/v1/models": _get("the served model"),
        "/tokenize": _post("tokenize a prompt or chat messages", "TokenizeRequest"),
        "/detokenize": _post("detokenize token ids", "DetokenizeRequest"),
        "/health": _get("200 while serving, 503 while draining or with the engine dead"),
        "/metrics": _get("Prometheus metrics"),
        "/version": _get("the server's version"),
        "/openapi.json": _get("this document"),
        "/admin/steps": _get("engine step records"),
        **batch_paths(),
        "/admin/batching": {
            **_get("live batching settings"),
            "put": {
                "summary": "change batching settings",
                "responses": {"200": {"description": "previous and current settings"}},
            },
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "batchgate reference server", "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    }
