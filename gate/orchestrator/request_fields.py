"""Which of the load generator's non-standard request fields a target refuses.

Owns `EXTENSION_FIELDS` (the body fields beyond OpenAI's that the load generator may send:
`min_tokens` and `ignore_eos` for exact answer lengths in probes and trace replays, `top_k` in
the sampling mix, `thinking_tokens` and `chat_template_kwargs` in the reasoning mix,
`repetition_penalty` in a user's `extra_body`) and the start-of-run check that finds which ones
a strict-schema server (Hugging Face `transformers serve`: HTTP 422 on an unknown field) refuses:
one tiny chat request carrying all of them; only when that one is refused with a 4xx, the same
request without them, then one with each field alone (at most 2 + len(EXTENSION_FIELDS)
requests, each of one token). A field is refused when a request with it gets a 4xx the plain one
does not. A target that accepts the set costs one request. It never raises: a probe that cannot
tell (no answer, the plain request refused too) says why and refuses nothing, so the load is
sent as before. It does not drop fields (the load generator does, `--drop-fields`) nor decide
which gates that leaves unmeasurable (`gate.orchestrator.capabilities`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["EXTENSION_FIELDS", "FieldProbe", "probe_fields", "refused_line"]

# Each field with a small value a server that knows it accepts (max_tokens is 1).
EXTENSION_FIELDS: dict[str, Any] = {
    "min_tokens": 1,
    "ignore_eos": True,
    "top_k": 1,
    "repetition_penalty": 1.0,
    "thinking_tokens": 1,
    "chat_template_kwargs": {"enable_thinking": False},
}

# POST one chat body: (HTTP status, or None when no answer came; a short reason).
Post = Callable[[dict[str, Any]], tuple[int | None, str]]


@dataclass(frozen=True, kw_only=True)
class FieldProbe:
    refused: tuple[str, ...]  # in EXTENSION_FIELDS' order
    status: int | None  # what the request with every field got (None: no answer)
    requests: int  # how many requests the probe sent
    note: str | None = None  # why the probe could not tell, or how it decided


def _refused(status: int | None) -> bool:
    return status is not None and 400 <= status < 500


def probe_fields(post: Post, model: str | None) -> FieldProbe:
    """Which EXTENSION_FIELDS the target behind `post` refuses (see the module docstring)."""
    plain: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "stream": True,
    }
    if model is not None:
        plain["model"] = model
    status, why = post({**plain, **EXTENSION_FIELDS})
    if not _refused(status):
        note = None if status is not None and status < 400 else f"not checked: {why}"
        return FieldProbe(refused=(), status=status, requests=1, note=note)
    plain_status, plain_why = post(plain)
    if plain_status is None or plain_status >= 400:
        return FieldProbe(
            refused=(),
            status=status,
            requests=2,
            note=f"not checked: a request without them was refused too ({plain_why})",
        )
    refused = []
    for name, value in EXTENSION_FIELDS.items():
        alone, _ = post({**plain, name: value})
        if _refused(alone):
            refused.append(name)
    requests = 2 + len(EXTENSION_FIELDS)
    if not refused:
        # Refused together but each accepted alone: every one is left out (the load must not
        # be refused), and the manifest says why.
        return FieldProbe(
            refused=tuple(EXTENSION_FIELDS),
            status=status,
            requests=requests,
            note=f"each field was accepted alone, all of them together refused ({why})",
        )
    return FieldProbe(refused=tuple(refused), status=status, requests=requests, note=why)


def refused_line(refused: tuple[str, ...], status: int | None) -> str:
    """The one line a run prints when the target refuses some fields."""
    return (
        f"batchgate: the target refuses the request fields {', '.join(refused)} (HTTP {status}): "
        "the load generator leaves them out of every request"
    )
