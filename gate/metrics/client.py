"""Client-side derivations: the glossary metrics (docs/gates.md) measured from request records.

Owns the formulas of TTFT (the first token of either kind), TTFC (the first answer token after
any reasoning), reasoning tokens per request, TTFT from planned, E2E, E2E from planned,
per-token ITL, TPOT, schedule lag, goodput, throughput, output tokens, error and 5xx shares, and
recovery time after a burst. Answer-consistency probes (records marked `probe`) are load but
not the profile's traffic: left out of every metric here but errors and 5xx
(`gate.metrics.consistency` compares their answers). It returns measurements; it does not read
files (`gate.rundir.requests`) or judge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gate.metrics.measurements import Events, Measurement, NoData, Samples, Scalar
from gate.metrics.window import Window, request_mask, scope_seconds

if TYPE_CHECKING:
    from gate.gates.spec import Scope, Slos
    from gate.rundir.run import ProfileData

__all__ = ["client", "goodput_mask", "tpot"]


def client(
    profile: ProfileData,
    metric: str,
    statistic: str,
    scope: Scope,
    window: Window,
    slos: Slos,
    *,
    memo: dict[Any, Any] | None = None,
) -> Measurement:
    """One client metric; `memo` (a dict kept for one evaluation of one run) keeps the arrays
    gates on the same profile share (a scope's mask, the ok mask, a formula over all requests),
    so thirty gates over 1M requests compute each once. Nothing handed out aliases them."""
    req = profile.requests
    if req is None:
        return NoData(reason=f"profile {profile.name!r} has no requests.jsonl")

    def shared(key: tuple[Any, ...], make: Callable[[], np.ndarray]) -> np.ndarray:
        if memo is None:
            return make()
        key = (profile.name, *key)
        if key not in memo:
            memo[key] = make()
        return memo[key]

    mask = shared(("mask", scope, window), lambda: request_mask(profile, scope, window))
    ok = shared(("ok",), lambda: req.status.equals("ok"))
    if metric == "itl":
        return Samples(values=_itl_in(req, mask))
    if metric == "recovery_time":
        return _recovery(profile, slos)
    if metric in ("ttfc", "reasoning_tokens") and req.first_content_at is None:
        return NoData(reason="the records have no reasoning-aware fields")
    # A request that timed out or was cancelled before its first token waited at least until
    # it ended: left out, a TTFT gate would judge only the requests that were served in time.
    unserved = shared(("unserved",), lambda: _unserved(req))
    formulas = {
        "ttft": lambda: _waited(req.first_token_at, req.sent_at, req.done_at, unserved),
        "ttfc": lambda: _waited(
            _first_content(req), req.sent_at, req.done_at, _unserved(req, _first_content(req))
        ),
        "reasoning_tokens": lambda: np.where(ok, req.reasoning_tokens, np.nan),
        "ttft_from_planned": lambda: _waited(
            req.first_token_at, req.planned_at, req.done_at, unserved
        ),
        "e2e": lambda: np.where(ok, req.done_at - req.sent_at, np.nan),
        "e2e_from_planned": lambda: np.where(ok, req.done_at - req.planned_at, np.nan),
        "tpot": lambda: tpot(req.first_token_at, req.done_at, req.output_tokens, ok),
        "schedule_lag": lambda: req.sent_at - req.planned_at,
    }
    if metric in formulas:
        values = shared(("formula", metric), formulas[metric])
        values = values[mask]
        note = None
        if metric.startswith("ttf") and (waited := int(np.count_nonzero(unserved & mask))):
            note = (
                f"{waited} requests timed out or were cancelled before a first token: counted "
                "with the time they waited (a lower bound)"
            )
        return Samples(values=values[~np.isnan(values)], note=note)
    if not mask.any():
        # A count, share or rate of nothing: "0 errors" in a scope that holds no request would
        # pass an `== 0` gate on no evidence.
        return NoData(reason="empty scope: no requests")
    seconds = scope_seconds(profile, scope, window)
    if metric == "output_tokens":
        tokens = np.nan_to_num(req.output_tokens[mask & ok])
        if statistic == "mean":
            return Samples(values=tokens)
        return Events(hits=int(tokens.sum()), total=int((mask & ok).sum()), window_seconds=seconds)
    if metric in ("errors", "http_5xx"):
        # A probe that failed is a failed request of the profile's load.
        mask = shared(
            ("mask+probes", scope, window),
            lambda: request_mask(profile, scope, window, probes=True),
        )
    hits = {
        "errors": lambda: ~ok,
        "http_5xx": lambda: (req.http_status >= 500) & (req.http_status < 600),
        "requests": lambda: ok,
        "goodput": lambda: goodput_mask(req, ok, slos),
    }[metric]()
    return Events(hits=int((hits & mask).sum()), total=int(mask.sum()), window_seconds=seconds)


def _itl_in(req: Any, mask: np.ndarray) -> np.ndarray:
    """The ITL gaps of the requests in `mask`. Requests are stored in planned order, so a scope
    cut only by the window is one run of them: its gaps are then a view, not a 128 MB copy."""
    selected = np.flatnonzero(mask)
    if len(selected) == 0:
        return req.itl_seconds[:0]
    first, last = int(selected[0]), int(selected[-1])
    if last - first + 1 == len(selected):
        before = int(req.itl_counts[:first].sum())
        return req.itl_seconds[before : before + int(req.itl_counts[first : last + 1].sum())]
    return _gaps_of(req.itl_seconds, req.itl_counts, mask)


# Requests whose gaps are selected at a time in `_gaps_of`: ~1M gaps, a 1 MiB expanded mask.
_GAP_SLICE_REQUESTS = 1 << 15


def _gaps_of(gaps: np.ndarray, counts: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The gaps of the requests in `mask` (`counts[i]` gaps each, back to back), slice by slice
    of requests: the mask expanded to every gap (32 MiB for 32M gaps) was fresh memory each
    call, which a virtual machine's host may charge more for than the copy costs."""
    out = np.empty(int(counts[mask].sum()), dtype=gaps.dtype)
    start = filled = 0
    for first in range(0, len(counts), _GAP_SLICE_REQUESTS):
        last = min(first + _GAP_SLICE_REQUESTS, len(counts))
        stop = start + int(counts[first:last].sum())
        chosen = mask[first:last]
        if chosen.any():
            selected = gaps[start:stop][np.repeat(chosen, counts[first:last])]
            out[filled : filled + len(selected)] = selected
            filled += len(selected)
        start = stop
    return out


_UNSERVED = ("timeout", "cancelled")


def _unserved(req: Any, first: np.ndarray | None = None) -> np.ndarray:
    """Requests that ended waiting (timed out, or cancelled at the load's end) before any
    token (of `first`'s kind): their TTFT is censored at their end, not unknown. An error answer
    is not a wait."""
    first = req.first_token_at if first is None else first
    return req.status.mask(_UNSERVED) & np.isnan(first)


def _first_content(req: Any) -> np.ndarray:
    """The first answer token's time; a record without reasoning or answer times (written before
    they existed, when only answer chunks were timed) has its first token there."""
    neither = np.isnan(req.first_content_at) & np.isnan(req.first_reasoning_at)
    return np.where(neither, req.first_token_at, req.first_content_at)


def _waited(
    first_token_at: np.ndarray, start: np.ndarray, done_at: np.ndarray, unserved: np.ndarray
) -> np.ndarray:
    """first token - start; for `unserved` requests done - start, the least their TTFT was."""
    return np.where(unserved, done_at, first_token_at) - start


def tpot(
    first_token_at: np.ndarray, done_at: np.ndarray, output_tokens: np.ndarray, ok: np.ndarray
) -> np.ndarray:
    """(done - first token) / (output_tokens - 1) for ok requests with more than one token."""
    with np.errstate(divide="ignore", invalid="ignore"):
        values = (done_at - first_token_at) / (output_tokens - 1)
    return np.where(ok & (output_tokens > 1), values, np.nan)


def goodput_mask(req: Any, ok: np.ndarray, slos: Slos) -> np.ndarray:
    """Ok requests meeting every SLO given; a TPOT SLO ignores single-token answers."""
    good = ok.copy()
    if slos.ttft_seconds is not None:
        good &= (req.first_token_at - req.sent_at) <= slos.ttft_seconds
    if slos.e2e_seconds is not None:
        good &= (req.done_at - req.sent_at) <= slos.e2e_seconds
    if slos.tpot_seconds is not None:
        per_token = tpot(req.first_token_at, req.done_at, req.output_tokens, ok)
        good &= np.isnan(per_token) | (per_token <= slos.tpot_seconds)
    return good


def _recovery(profile: ProfileData, slos: Any) -> Measurement:
    factor, bin_seconds = slos.recovery_factor, slos.recovery_window_seconds
    req = profile.requests
    assert req is not None
    stages = {s.get("name"): s for s in (profile.load or {}).get("stages") or []}
    if "spike" not in stages or "baseline" not in stages:
        return NoData(reason="recovery time needs `baseline` and `spike` stages in load.json")
    ttft = req.first_token_at - req.sent_at
    before = ttft[req.stage.equals("baseline") & (req.planned_at < stages["spike"]["start"])]
    before = before[~np.isnan(before)]
    if len(before) == 0:
        return NoData(reason="no TTFT samples before the spike")
    limit = factor * float(np.quantile(before, 0.99))
    spike_end = float(stages["spike"]["end"])
    after = (req.sent_at >= spike_end) & ~np.isnan(ttft)
    times, values = req.sent_at[after], ttft[after]
    if len(times) == 0:
        return NoData(reason="no requests after the spike")
    span = float(times.max() - spike_end)
    for k in range(math.ceil(span / bin_seconds) + 1):
        lo, hi = spike_end + k * bin_seconds, spike_end + (k + 1) * bin_seconds
        in_bin = values[(times >= lo) & (times < hi)]
        if len(in_bin) and float(np.quantile(in_bin, 0.99)) <= limit:
            return Scalar(value=hi - spike_end, n=len(values))
    return Scalar(
        value=span, n=len(values), lower_bound=True, note="not recovered by the end of the run"
    )
