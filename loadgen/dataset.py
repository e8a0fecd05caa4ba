"""Prompt datasets: a JSONL file of prompts used instead of synthetic text.

Owns reading and validating the dataset file. Each line is one of:
`{"prompt": "text", "output_tokens": 64}` (output_tokens optional),
`{"messages": [{"role": "user", "content": "..."}, ...]}` (OpenAI chat), or ShareGPT
`{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}` (the
first human turn is the prompt; the first gpt turn's length in bytes sets output_tokens). It does
not know how entries are chosen per request (see `loadgen.plan`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import ConfigError

__all__ = ["DatasetEntry", "load_dataset"]

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
}


@dataclass(frozen=True, kw_only=True)
class DatasetEntry:
    messages: tuple[tuple[str, str], ...]  # (role, content) pairs ending with a user turn
    output_tokens: int | None

    @property
    def text(self) -> str:
        return "\n".join(content for _, content in self.messages)


def _parse(obj: object, where: str) -> DatasetEntry:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    out = obj.get("output_tokens")
    if out is not None and (not isinstance(out, int) or isinstance(out, bool) or out < 1):
        raise ConfigError(f"{where}: output_tokens must be a positive integer")
    if isinstance(obj.get("prompt"), str):
        return DatasetEntry(messages=(("user", obj["prompt"]),), output_tokens=out)
    turns = obj.get("messages")
    sharegpt = turns is None and "conversations" in obj
    if sharegpt:
        turns = obj["conversations"]
    if not isinstance(turns, list) or not turns:
        raise ConfigError(f"{where}: needs 'prompt', 'messages' or 'conversations'")
    messages: list[tuple[str, str]] = []
    for turn in turns:
        if not isinstance(turn, dict):
            raise ConfigError(f"{where}: each turn must be an object")
        role = turn.get("from") if sharegpt else turn.get("role")
        content = turn.get("value") if sharegpt else turn.get("content")
        if role not in _ROLES or not isinstance(content, str):
            raise ConfigError(f"{where}: turn with unknown role {role!r} or non-text content")
        if _ROLES[role] == "assistant" and messages and messages[-1][0] == "user":
            if out is None:
                out = max(len(content.encode()), 1)
            break  # the prompt is everything up to the first answer
        messages.append((_ROLES[role], content))
    if not messages or messages[-1][0] != "user":
        raise ConfigError(f"{where}: no user turn to send")
    return DatasetEntry(messages=tuple(messages), output_tokens=out)


def load_dataset(path: str | Path) -> list[DatasetEntry]:
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read dataset {file}: {exc.strerror or exc}") from exc
    entries = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file}:{n}: not valid JSON ({exc.msg})") from exc
        entries.append(_parse(obj, f"{file}:{n}"))
    if not entries:
        raise ConfigError(f"dataset {file} holds no prompts")
    return entries
