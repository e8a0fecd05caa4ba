"""Median TTFT, per-token ITL and TPOT of loadgen request records, by the gate's formulas.

Owns choosing the records of a window (sent within it), taking their medians, and the noise of
those medians (`median_noise`: a block bootstrap over send time); the formulas themselves are
the gate's (`gate.rundir.gaps.itl_gaps`, `gate.metrics.client.tpot`), as in
tests/loadgen/lg_support.py. It does not read files or run anything.
"""

from __future__ import annotations

import itertools
import random
import statistics
from typing import Any

import numpy as np

from gate.metrics.client import tpot as gate_tpot
from gate.rundir.gaps import itl_gaps

__all__ = ["median_noise", "record_medians"]


def _ms(values: list[float]) -> float | None:
    return statistics.median(values) * 1000 if values else None


def _chunk_gaps(record: dict[str, Any]) -> list[float]:
    """One gap per pair of content chunks, whatever the tokens they carry."""
    times = record["chunk_times"]
    return [b - a for a, b in itertools.pairwise(times)]


def _zero_filled_gaps(record: dict[str, Any]) -> list[float]:
    """inference-perf's per-token gaps: every token of a chunk is stamped with the chunk's
    arrival, so a chunk of k tokens adds its gap and k - 1 zeros."""
    tokens = [max(k, 1) for k in record["chunk_tokens"]]
    stamps = [t for t, k in zip(record["chunk_times"], tokens, strict=True) for _ in range(k)]
    return [b - a for a, b in itertools.pairwise(stamps)]


def record_medians(
    records: list[dict[str, Any]], window: tuple[float, float] | None = None
) -> dict[str, Any]:
    """Medians (ms) over the records sent inside `window` (monotonic seconds; None: all)."""
    chosen = [
        r
        for r in records
        if r.get("sent_at") is not None
        and (window is None or window[0] <= r["sent_at"] <= window[1])
    ]
    ok = [r for r in chosen if r["status"] == "ok" and r["first_token_at"] is not None]
    ttfts = [r["first_token_at"] - r["sent_at"] for r in ok]
    times = np.array([t for r in ok for t in r["chunk_times"]], dtype=np.float64)
    tokens = np.array([k for r in ok for k in r["chunk_tokens"]], dtype=np.int64)
    num_chunks = np.array([len(r["chunk_times"]) for r in ok], dtype=np.int64)
    gaps, _ = itl_gaps(times, tokens, num_chunks)
    chunk_gaps = [gap for r in ok for gap in _chunk_gaps(r)]
    zero_filled = [gap for r in ok for gap in _zero_filled_gaps(r)]

    def col(key: str) -> np.ndarray:
        return np.array([np.nan if r[key] is None else float(r[key]) for r in ok])

    tpots = gate_tpot(
        col("first_token_at"), col("done_at"), col("output_tokens"), np.ones(len(ok), dtype=bool)
    )
    tpots = tpots[~np.isnan(tpots)]
    return {
        "requests": len(chosen),
        "errors": len(chosen) - len([r for r in chosen if r["status"] == "ok"]),
        "ttft_p50_ms": _ms(ttfts),
        "itl_p50_ms": _ms([float(g) for g in gaps]),
        "tpot_p50_ms": _ms([float(t) for t in tpots]),
        "chunk_gap_p50_ms": _ms(chunk_gaps),
        "zero_filled_itl_p50_ms": _ms(zero_filled),
        "tokens_per_chunk_mean": float(tokens.mean()) if len(tokens) else None,
        "output_tokens_median": statistics.median(r["output_tokens"] or 0 for r in ok)
        if ok
        else None,
        "prompt_tokens_median": statistics.median(r["prompt_tokens"] or 0 for r in ok)
        if ok
        else None,
        "chunk_tokens_sources": sorted({str(r.get("chunk_tokens_source")) for r in ok}),
        "window": (min(r["sent_at"] for r in ok), max(r["done_at"] for r in ok)) if ok else None,
    }


def median_noise(
    records: list[dict[str, Any]],
    window: tuple[float, float] | None,
    keys: tuple[str, ...],
    *,
    block_seconds: float = 1.0,
    rounds: int = 200,
    seed: int = 0,
) -> dict[str, float | None]:
    """Standard error (ms) of each `record_medians` value in `keys`, by a block bootstrap.

    Requests are resampled in blocks of `block_seconds` of send time, not one by one: requests
    close in time meet the same server state (its batch, an idle engine waking up, the
    machine's other work), so their latencies are correlated and an i.i.d. bootstrap would
    understate the noise of a median. None where fewer than two blocks or no value exist.
    """
    chosen = [
        r
        for r in records
        if r.get("sent_at") is not None
        and (window is None or window[0] <= r["sent_at"] <= window[1])
    ]
    if not chosen:
        return {key: None for key in keys}
    start = min(r["sent_at"] for r in chosen)
    blocks: dict[int, list[dict[str, Any]]] = {}
    for r in chosen:
        blocks.setdefault(int((r["sent_at"] - start) // block_seconds), []).append(r)
    groups = list(blocks.values())
    if len(groups) < 2:
        return {key: None for key in keys}
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {key: [] for key in keys}
    for _ in range(rounds):
        sample = [r for group in rng.choices(groups, k=len(groups)) for r in group]
        medians = record_medians(sample)
        for key in keys:
            if medians[key] is not None:
                draws[key].append(medians[key])
    return {key: statistics.pstdev(v) if len(v) > 1 else None for key, v in draws.items()}
