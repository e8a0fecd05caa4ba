"""The OpenAI response shapes of one completion request: the non-streaming body, the streamed
chunks (role, answer text, thinking mode's reasoning text, finish, usage) and `usage` itself.

Owns the JSON of each piece, including vLLM's `continuous_usage_stats` running usage and the
pre-rendered frame of the per-token chunks (the streaming hot path); it knows nothing about how
outputs arrive or are sent (generation.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from reference_server.api.protocol import GenerationRequest
from reference_server.api.sse import sse_event

__all__ = ["ResponseShapes", "finish_reason"]

# Engine reasons OpenAI clients do not know map onto the nearest OpenAI one.
_FINISH_REASON_MAP = {"max_model_len": "length"}


def _usage_of(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int | None
) -> dict[str, Any]:
    # prompt_tokens_details is always there (0 when nothing was cached or caching is off), so a
    # client reads one shape whatever the server's settings (docs/server.md).
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens is not None:  # thinking mode: completion_tokens counts them too
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def finish_reason(output: Any) -> str | None:
    reason = output.finish_reason
    return _FINISH_REASON_MAP.get(reason, reason)


class ResponseShapes:
    """Response bodies and chunks of one endpoint ("chat" or "completions")."""

    def __init__(self, request: GenerationRequest, model: str) -> None:
        self.chat = request.endpoint == "chat"
        prefix = "chatcmpl" if self.chat else "cmpl"
        self.request_id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = request.include_usage
        self.continuous_usage = request.include_usage and request.continuous_usage
        self._num_prompt_tokens = len(request.prompt_token_ids)
        self._chunk_object = "chat.completion.chunk" if self.chat else "text_completion"
        # Thinking mode (chat): reasoning streams as delta.reasoning_content (vLLM's reasoning
        # parser format), and usage counts it in completion_tokens_details.reasoning_tokens.
        self.thinking = self.chat and request.params.thinking
        self._content_frame: tuple[bytes, bytes] | None = None
        self._reasoning_frame: tuple[bytes, bytes] | None = None

    def _usage(self, output: Any) -> dict[str, Any]:
        reasoning = output.num_reasoning_tokens if self.thinking else None
        return _usage_of(
            output.num_prompt_tokens, output.num_output_tokens, output.num_cached_tokens, reasoning
        )

    def chunk(self, choice: dict[str, Any], usage: dict[str, Any] | None = None) -> bytes:
        body: dict[str, Any] = {
            "id": self.request_id,
            "object": self._chunk_object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }
        if self.include_usage:
            body["usage"] = usage
        return sse_event(body)

    def _running_usage(self, output: Any, *, started: bool = True) -> dict[str, Any] | None:
        """The cumulative usage a chunk carries: only with continuous usage stats. `started`
        False: before any output token (the role chunk), whatever `output` holds."""
        if not self.continuous_usage:
            return None
        reasoning = 0 if self.thinking else None
        if output is None:
            return _usage_of(self._num_prompt_tokens, 0, 0, reasoning)
        if not started:
            return _usage_of(output.num_prompt_tokens, 0, output.num_cached_tokens, reasoning)
        return self._usage(output)

    def content_chunk(self, text: str, output: Any = None) -> bytes:
        if self.continuous_usage:
            if self.chat:
                choice = {"index": 0, "delta": {"content": text}, "finish_reason": None,
                          "logprobs": None}  # fmt: skip
            else:
                choice = {"index": 0, "text": text, "finish_reason": None, "logprobs": None}
            return self.chunk(choice, self._running_usage(output))
        # The hot path (one call per token per stream): a pre-rendered frame around the text,
        # byte-identical to chunk() of the same choice.
        if self._content_frame is None:
            marker = "\x00"
            if self.chat:
                choice = {"index": 0, "delta": {"content": marker}, "finish_reason": None,
                          "logprobs": None}  # fmt: skip
            else:
                choice = {"index": 0, "text": marker, "finish_reason": None, "logprobs": None}
            before, after = self.chunk(choice).split(orjson.dumps(marker))
            self._content_frame = (before, after)
        before, after = self._content_frame
        return before + orjson.dumps(text) + after

    def reasoning_chunk(self, text: str, output: Any = None) -> bytes:
        """A chat chunk of reasoning text (thinking mode): `delta.reasoning_content`."""
        if self.continuous_usage:
            choice = {"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None,
                      "logprobs": None}  # fmt: skip
            return self.chunk(choice, self._running_usage(output))
        if self._reasoning_frame is None:
            marker = "\x00"
            choice = {"index": 0, "delta": {"reasoning_content": marker}, "finish_reason": None,
                      "logprobs": None}  # fmt: skip
            before, after = self.chunk(choice).split(orjson.dumps(marker))
            self._reasoning_frame = (before, after)
        before, after = self._reasoning_frame
        return before + orjson.dumps(text) + after

    def text_chunks(self, output: Any) -> bytes:
        """The chunks of one engine output: its reasoning, then its answer text (b"" if none)."""
        chunks = b""
        if output.new_reasoning_text:
            chunks = self.reasoning_chunk(output.new_reasoning_text, output)
        if output.new_text:
            chunks += self.content_chunk(output.new_text, output)
        return chunks

    def role_chunk(self, output: Any = None) -> bytes:
        """`output`: the request's first output, whose cached-token count the chunk's running
        usage (if any) already carries."""
        delta = {"role": "assistant", "content": ""}
        choice = {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}
        return self.chunk(choice, self._running_usage(output, started=False))

    def finish_chunk(self, reason: str | None, output: Any = None) -> bytes:
        if self.chat:
            choice = {"index": 0, "delta": {}, "finish_reason": reason, "logprobs": None}
        else:
            choice = {"index": 0, "text": "", "finish_reason": reason, "logprobs": None}
        return self.chunk(choice, self._running_usage(output) if output is not None else None)

    def usage_chunk(self, output: Any) -> bytes:
        return sse_event(
            {
                "id": self.request_id,
                "object": self._chunk_object,
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self._usage(output),
            }
        )

    def body(self, text: str, output: Any, reasoning_text: str = "") -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.thinking:
                message["reasoning_content"] = reasoning_text
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(output),
                "logprobs": None,
            }
            kind = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "finish_reason": finish_reason(output),
                "logprobs": None,
            }
            kind = "text_completion"
        return {
            "id": self.request_id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self._usage(output),
        }
