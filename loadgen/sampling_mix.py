"""Per-request sampling parameters and thinking mode: the request-body fields a traffic class adds.

Owns `request_body(cls, seed, index)`: a class's fixed `extra_body` (e.g. thinking on), and for a
class whose `sampling` is "mixed", sampling parameters drawn per request from `SIGNATURES`
(temperature, top_p, top_k, seed, penalties, logit_bias, stop), seeded by the profile's seed and
the request's index so every worker plans the same body. Every draw is a different sampling
signature from most of its neighbours' (a family and one of `TEMPERATURES`): an engine that
batches only requests of one signature serves a few rows a step instead of the whole batch. It
does not send anything or know about schedules.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.profile_spec import TrafficClass

__all__ = ["SAMPLING_KINDS", "SIGNATURES", "request_body"]

SAMPLING_KINDS = ("default", "mixed")

# The parameter families a mixed batch holds (issue: "temperature, top_p, top_k, seed,
# penalties, logit_bias, stop"). Each request takes one family, a temperature of its own (but
# for greedy) and its own seed.
SIGNATURES: tuple[Mapping[str, Any], ...] = (
    {"temperature": 0.0},
    {"temperature": 0.7, "top_p": 0.9},
    {"temperature": 1.0, "top_k": 20},
    {"temperature": 0.8, "presence_penalty": 0.5, "frequency_penalty": 0.3},
    {"temperature": 0.9, "logit_bias": {"32": -5}},
    {"temperature": 0.6, "top_p": 0.95, "stop": ["\n\n\n"]},
)


# Temperatures a sampled family's request takes one of: with the families, ~25 signatures a
# batch of 64 rows holds at once (an engine that serves one signature a step serves ~3 rows).
TEMPERATURES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def request_body(cls: TrafficClass, seed: int, index: int) -> dict[str, Any] | None:
    """The body fields request `index` of class `cls` adds; None when it adds none."""
    body: dict[str, Any] = dict(cls.extra_body or {})
    if cls.sampling == "mixed":
        rng = random.Random(f"{seed}-sampling-{index}")
        body.update(SIGNATURES[rng.randrange(len(SIGNATURES))])
        if body.get("temperature", 1.0) > 0:
            body["temperature"] = TEMPERATURES[rng.randrange(len(TEMPERATURES))]
            body["seed"] = rng.randrange(1 << 31)
    return body or None
