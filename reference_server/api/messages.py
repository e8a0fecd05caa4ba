"""Chat messages as clients send them, read into the `{role, content}` list the chat template takes.

Owns the message shape shared by /v1/chat/completions and /tokenize: roles (`developer` is an
alias of `system`), string or text-part content, `content: null` (or absent) on assistant
messages, and the message-count bound. Unknown keys inside a message or a content part are
refused or collected by the request's `UnknownFields`. It knows nothing about sampling or HTTP.
"""

from __future__ import annotations

from reference_server.api.errors import APIError
from reference_server.api.fields import BodyReader, UnknownFields, type_name

__all__ = ["CHAT_ROLE_ALIASES", "MESSAGE_FIELDS", "read_messages"]

# OpenAI's newer "developer" role plays the part "system" plays in our chat template.
CHAT_ROLE_ALIASES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
MESSAGE_FIELDS = ("role", "content", "name")
_CONTENT_PART_FIELDS = ("type", "text")


def read_messages(
    reader: BodyReader, max_messages: int, unknown: UnknownFields
) -> list[dict[str, str]]:
    raw = reader.raw("messages")
    if raw is None:
        raise APIError.invalid("messages", "is required", code="missing_required_parameter")
    if not isinstance(raw, list):
        raise APIError.invalid("messages", f"must be an array, got {type_name(raw)}")
    if not raw:
        raise APIError.invalid("messages", "must not be empty")
    if len(raw) > max_messages:
        raise APIError.invalid("messages", f"at most {max_messages} messages")
    messages = []
    for index, item in enumerate(raw):
        message = BodyReader(item, where=f"messages[{index}]")
        unknown.check(message, MESSAGE_FIELDS)
        role = message.string("role")
        if role not in CHAT_ROLE_ALIASES:
            raise APIError.invalid(
                message.path("role"), f"must be one of {', '.join(CHAT_ROLE_ALIASES)}"
            )
        message.string("name")
        content = _content(message, role, unknown)
        messages.append({"role": CHAT_ROLE_ALIASES[role], "content": content})
    return messages


def _content(message: BodyReader, role: str, unknown: UnknownFields) -> str:
    raw = message.raw("content")
    if raw is None and role == "assistant":
        return ""  # OpenAI and vLLM allow a null content on assistant turns (e.g. tool calls)
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        parts = []
        for index, item in enumerate(raw):
            part = BodyReader(item, where=f"{message.path('content')}[{index}]")
            unknown.check(part, _CONTENT_PART_FIELDS)
            part.string("type", choices=("text",))
            text = part.string("text")
            if text is None:
                raise APIError.invalid(part.path("text"), "is required")
            parts.append(text)
        return "".join(parts)
    raise APIError.invalid(
        message.path("content"), f"must be a string or an array of text parts, got {type_name(raw)}"
    )
