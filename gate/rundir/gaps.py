"""Per-token inter-token gaps from chunk arrival times (ITL in the glossary, docs/gates.md).

Owns the one definition of how chunks become per-token gaps, used by both record readers (the
JSONL parser and the columnar mirror) while they read, block by block, so a million requests'
chunks never exist as Python floats. It does not read files or know gates.
"""

from __future__ import annotations

import numpy as np

__all__ = ["itl_gaps"]


def itl_gaps(
    times: np.ndarray, tokens: np.ndarray | None, num_chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ITL: a chunk carrying k tokens after a gap Δt contributes k gaps of Δt/k.

    `times` / `tokens` are the chunks of all requests back to back (`tokens` None: one token
    each), `num_chunks` the chunks per request. Returns the gaps and how many belong to each.
    """
    n = len(num_chunks)
    if len(times) < 2:
        return np.zeros(0, dtype=np.float32), np.zeros(n, dtype=np.int64)
    # Gap j joins chunks j and j + 1; it crosses a request boundary right after each request's
    # last chunk (a mask from the boundaries: cheaper than comparing per-chunk owners).
    ends = np.cumsum(num_chunks)[:-1]
    same = np.ones(len(times) - 1, dtype=bool)
    same[ends[(ends > 0) & (ends < len(times))] - 1] = False
    # float32 halves the largest array of a run (32M gaps for 1M requests); its 24-bit mantissa
    # still resolves a 20 ms gap to about a nanosecond.
    delta = np.diff(times)[same].astype(np.float32)
    if tokens is None:
        return delta, np.maximum(num_chunks - 1, 0).astype(np.int64)
    k = tokens[1:][same]
    gaps = np.repeat(delta / np.maximum(k, 1).astype(np.float32), np.maximum(k, 0))
    owner = np.repeat(np.arange(n), num_chunks)
    counts = np.bincount(owner[1:][same], weights=k, minlength=n).astype(np.int64)
    return gaps, counts
