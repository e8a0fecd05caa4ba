"""The byte-level tokenizer: UTF-8 bytes as ids 0..255, special tokens above, a chat template,
and a streaming detokenizer that only ever emits whole characters.

It knows nothing about models or tensors (plain Python); ids at or above 256 carry no text, so a
checkpoint with a larger vocabulary still decodes (its non-byte ids are skipped).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from reference_server.errors import RequestValidationError

__all__ = ["CHAT_ROLES", "ByteTokenizer", "StreamingDetokenizer"]

NUM_BYTE_TOKENS = 256
CHAT_ROLES = ("system", "user", "assistant")


class ByteTokenizer:
    """UTF-8 bytes plus bos, eos, pad, one marker per chat role and an end-of-turn marker."""

    def __init__(self) -> None:
        self.bos_token_id = 256
        self.eos_token_id = 257
        self.pad_token_id = 258
        self.role_token_ids: dict[str, int] = {
            role: 259 + index for index, role in enumerate(CHAT_ROLES)
        }
        self.end_of_turn_token_id = 259 + len(CHAT_ROLES)
        self.vocab_size = self.end_of_turn_token_id + 1
        self.special_token_ids: tuple[int, ...] = tuple(range(NUM_BYTE_TOKENS, self.vocab_size))

    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode() needs a str, got {type(text).__name__}")
        # Lone surrogates (legal in JSON escapes) cannot be UTF-8 encoded; they become "?".
        ids = list(text.encode("utf-8", errors="replace"))
        return [self.bos_token_id, *ids] if add_bos else ids

    def decode(self, token_ids: Sequence[int]) -> str:
        data = bytes(t for t in token_ids if _checked_id(t) < NUM_BYTE_TOKENS)
        return data.decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, str]]) -> list[int]:
        """bos, then per message: <role> content-bytes <end>, then <assistant> to prompt a reply."""
        if not isinstance(messages, list) or not messages:
            raise RequestValidationError("messages", "must be a non-empty list")
        ids = [self.bos_token_id]
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                raise RequestValidationError(f"messages[{index}]", "must be an object")
            role = message.get("role")
            content = message.get("content")
            if role not in self.role_token_ids:
                raise RequestValidationError(
                    f"messages[{index}].role", f"must be one of {', '.join(CHAT_ROLES)}"
                )
            if not isinstance(content, str):
                raise RequestValidationError(f"messages[{index}].content", "must be a string")
            ids.append(self.role_token_ids[role])
            ids.extend(self.encode(content))
            ids.append(self.end_of_turn_token_id)
        ids.append(self.role_token_ids["assistant"])
        return ids


def _checked_id(token_id: int) -> int:
    if token_id < 0:
        raise ValueError(f"token ids must be non-negative, got {token_id}")
    return token_id


class StreamingDetokenizer:
    """Turns one request's token ids into text as they arrive, one whole character at a time."""

    def __init__(self, tokenizer: ByteTokenizer) -> None:
        self._tokenizer = tokenizer
        # The incremental decoder holds back an incomplete multi-byte character and replaces
        # invalid sequences exactly as a one-shot bytes.decode(errors="replace") would.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        _checked_id(token_id)
        if token_id >= NUM_BYTE_TOKENS:
            return ""
        return self._decoder.decode(bytes((token_id,)))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
