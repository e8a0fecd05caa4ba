"""Answer-consistency probes: the fixed probe set, and when a profile sends its probes.

Owns `PROBE_SET` (greedy probes at temperature 0 and seeded ones at temperature > 0, each a short
deterministic prompt asking for exactly `PROBE_MAX_TOKENS` tokens), the planned request of a probe
(marked with its index, so its record says `probe`), and `probe_schedule`: a profile's probes in
groups of `PROBE_GROUP` sent at once (two seeded probes in one batch are what a sampler shared by
the batch gets wrong), spread evenly over the profile's schedule. The same probes answered alone
come from the `consistency_probes` profile, which sends each once with the server otherwise idle;
the gate compares the two (docs/gates.md, answer_mismatch_rate). It does not send anything (the
load session does) nor compare answers (the gate does).
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass
from typing import Any

from loadgen.plan import PlannedRequest

__all__ = [
    "PROBE_GROUP",
    "PROBE_MAX_TOKENS",
    "PROBE_SET",
    "Probe",
    "probe_request",
    "probe_schedule",
]

PROBE_MAX_TOKENS = 24
PROBE_GROUP = 2
_PROBE_COUNT = 8


@dataclass(frozen=True, kw_only=True)
class Probe:
    index: int
    kind: str  # "greedy" | "seeded"
    prompt: str
    body: dict[str, Any]


def _probe_set() -> tuple[Probe, ...]:
    rng = random.Random("batchgate-consistency-probes-v1")
    letters = string.ascii_lowercase + "    "
    probes = []
    for index in range(_PROBE_COUNT):
        # Pairs of one kind: a group of PROBE_GROUP consecutive probes shares a kind, so two
        # seeded probes meet in one batch.
        seeded = (index // PROBE_GROUP) % 2 == 1
        prompt = "".join(rng.choices(letters, k=rng.randrange(24, 49)))
        body: dict[str, Any] = (
            {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + index}
            if seeded
            else {"temperature": 0.0}
        )
        probes.append(
            Probe(index=index, kind="seeded" if seeded else "greedy", prompt=prompt, body=body)
        )
    return tuple(probes)


PROBE_SET: tuple[Probe, ...] = _probe_set()


def probe_request(probe: Probe, *, index: int, offset_seconds: float, stage: str) -> PlannedRequest:
    """The planned request of `probe`: exactly PROBE_MAX_TOKENS tokens (min_tokens and
    ignore_eos, as a trace replay asks), so an early end of text does not hide a difference."""
    return PlannedRequest(
        index=index,
        offset_seconds=offset_seconds,
        stage=stage,
        priority="interactive",
        length_class="short",
        messages=(("user", probe.prompt),),
        prompt_tokens=len(probe.prompt.encode()),
        max_tokens=PROBE_MAX_TOKENS,
        exact_output=True,
        body=probe.body,
        probe=probe.index,
    )


def probe_schedule(count: int, duration_seconds: float) -> list[tuple[float, list[int]]]:
    """`count` probes as (offset seconds, probe indices) groups of PROBE_GROUP, at the middles
    of equal slices of the schedule; the probe set is cycled through in order."""
    if count <= 0 or duration_seconds <= 0:
        return []
    groups = math.ceil(count / PROBE_GROUP)
    out, sent = [], 0
    for k in range(groups):
        members = [(sent + j) % len(PROBE_SET) for j in range(min(PROBE_GROUP, count - sent))]
        sent += len(members)
        out.append(((k + 0.5) * duration_seconds / groups, members))
    return out
