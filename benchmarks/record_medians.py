"""Median TTFT, per-token ITL and TPOT of loadgen request records, by the gate's formulas.

Owns choosing the records of a window (sent within it) and taking their medians; the formulas
themselves are the gate's (`gate.rundir.gaps.itl_gaps`, `gate.metrics.client.tpot`), as in
tests/loadgen/lg_support.py. It does not read files or run anything.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import numpy as np

from gate.metrics.client import tpot as gate_tpot
from gate.rundir.gaps import itl_gaps

__all__ = ["record_medians"]


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
