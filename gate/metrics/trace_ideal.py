"""The ideal prefix-cache hit ratio of a profile's replayed trace window, for `"> 0.8x ideal"`.

Owns reading the window a `trace` profile wrote (`<profile>/trace.jsonl`: per request, in send
order, its prompt length, prefix hash ids and tokens per hash block), and turning it and the
target's KV capacity in tokens (calibration.json `kv_capacity.tokens`, asked of
`gate.calibration.references`) into the ideal that the gate compares the server's measured hit
ratio with: the window's hash ids through an LRU the size of the KV capacity
(`gate.metrics.prefix_ideal`), or through an infinite one, said in the note, where the target
does not state its capacity. It does not judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gate.calibration.content import Calibration
from gate.calibration.references import kv_capacity_tokens
from gate.metrics.prefix_ideal import ideal_hit_ratio

if TYPE_CHECKING:
    from gate.rundir.run import ProfileData

__all__ = ["Ideal", "profile_ideal"]


@dataclass(frozen=True, kw_only=True)
class Ideal:
    ratio: float | None  # None: no ideal, `note` says why
    note: str


def profile_ideal(profile: ProfileData, calibration: Calibration | None) -> Ideal:
    window = profile.trace_window
    if window is None:
        return Ideal(
            ratio=None,
            note=f"no {profile.name}/trace.jsonl: the ideal hit ratio needs a replayed window",
        )
    rows = []
    for number, row in enumerate(window, start=1):
        ids, block, prompt = row.get("hash_ids"), row.get("block_tokens"), row.get("input_tokens")
        if not isinstance(ids, list) or not isinstance(prompt, int) or prompt < 1:
            return Ideal(ratio=None, note=f"trace.jsonl:{number}: needs hash_ids and input_tokens")
        if ids and (not isinstance(block, int) or block < 1):
            return Ideal(ratio=None, note=f"trace.jsonl:{number}: hash_ids need block_tokens >= 1")
        rows.append((tuple(ids), int(block or 1), prompt))
    if not any(ids for ids, _, _ in rows):
        return Ideal(ratio=None, note="the replayed window has no prefix hash ids (no ideal)")
    tokens = kv_capacity_tokens(calibration)
    capacity = None if tokens is None else int(tokens)
    result = ideal_hit_ratio(rows, capacity_tokens=capacity)
    if result.queries_tokens <= 0:
        return Ideal(ratio=None, note="the replayed window has no prompt tokens")
    where = (
        f"an LRU of the target's KV capacity ({capacity} tokens)"
        if capacity is not None
        else "an infinite LRU (the target states no KV capacity)"
    )
    return Ideal(
        ratio=result.ratio,
        note=f"ideal hit ratio {result.ratio:.3f}: the window's prefixes through {where}",
    )
