"""Per-token inter-token gaps from chunk arrival times (ITL in the glossary, docs/gates.md).

Owns the one definition of how chunks become per-token gaps, used by both record readers (the
JSONL parser and the Parquet reader) while they read, so a million requests' chunks never exist
as Python floats. It does not read files or know gates.
"""

from __future__ import annotations

import numpy as np

__all__ = ["itl_gaps"]

# Gaps are taken this many chunk times at a time: the float64 differences and the mask of one
# slice stay in cache, and a run's 32M chunk times never get a 256 MB float64 copy (touching
# fresh memory was most of the time the whole-array version took).
_SLICE = 1 << 19


def itl_gaps(
    times: np.ndarray,
    tokens: np.ndarray | None,
    num_chunks: np.ndarray,
    *,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ITL: a chunk carrying k tokens after a gap Δt contributes k gaps of Δt/k.

    `times` / `tokens` are the chunks of all requests back to back (`tokens` None: one token
    each), `num_chunks` the chunks per request. Returns the gaps and how many belong to each.
    With `tokens` None the gaps may go into `out` (float32, as many as there are gaps: the
    chunks less one per request that has any), which is then what is returned.
    """
    n = len(num_chunks)
    if len(times) < 2:
        return np.zeros(0, dtype=np.float32) if out is None else out, np.zeros(n, dtype=np.int64)
    # Gap j joins chunks j and j + 1; it crosses a request boundary right after each request's
    # last chunk.
    ends = np.cumsum(num_chunks)[:-1]
    cuts = ends[(ends > 0) & (ends < len(times))] - 1  # non-decreasing
    if tokens is None:
        counts = np.maximum(num_chunks - 1, 0).astype(np.int64)
        total = int(counts.sum())
        if out is None:
            out = np.empty(total, dtype=np.float32)
        elif out.shape != (total,) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 of shape ({total},)")
        return _one_token_gaps(times, cuts, out), counts
    same = np.ones(len(times) - 1, dtype=bool)
    same[cuts] = False
    # float32 halves the largest array of a run (32M gaps for 1M requests); its 24-bit mantissa
    # still resolves a 20 ms gap to about a nanosecond.
    delta = np.diff(times)[same].astype(np.float32)
    k = tokens[1:][same]
    gaps = np.repeat(delta / np.maximum(k, 1).astype(np.float32), np.maximum(k, 0))
    owner = np.repeat(np.arange(n), num_chunks)
    counts = np.bincount(owner[1:][same], weights=k, minlength=n).astype(np.int64)
    return gaps, counts


def _one_token_gaps(times: np.ndarray, cuts: np.ndarray, out: np.ndarray) -> np.ndarray:
    # The same values as np.diff(times)[same].astype(float32), slice by slice.
    num_diffs = len(times) - 1
    delta = np.empty(min(_SLICE, num_diffs), dtype=np.float64)
    keep = np.empty(len(delta), dtype=bool)
    starts = range(0, num_diffs, _SLICE)
    bounds = np.searchsorted(cuts, [*starts, num_diffs])
    filled = 0
    for i, start in enumerate(starts):
        stop = min(start + _SLICE, num_diffs)
        d = np.subtract(times[start + 1 : stop + 1], times[start:stop], out=delta[: stop - start])
        inside = cuts[bounds[i] : bounds[i + 1]]
        if len(inside):
            mask = keep[: stop - start]
            mask.fill(True)
            mask[inside - start] = False
            d = d[mask]
        out[filled : filled + len(d)] = d
        filled += len(d)
    return out
