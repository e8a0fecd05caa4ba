"""The step-time cost model of the `slo` policy: it predicts one step's duration from the work the
step computes, is fitted online from the engine's own steps, and sizes the next step's token
budget so that the predicted step time stays under the target.

It owns the features, the fit and the budget search. It does not schedule (the scheduler asks it
for a budget) and does not time steps (the engine feeds it each step's features and duration).

The model is linear in five features of a step: a constant, the rows (sequences) it runs, its
prefill tokens, the context tokens its attention reads, and the prefill-attention work (a chunk of
n new tokens starting at position s costs n * (s + n)). Features are scaled to about 1 and
durations are in milliseconds. The fit is recursive least squares in information form: it keeps
the coefficients and their information matrix G (5x5) and, each step, solves

    theta = argmin (theta - theta_prev)' A (theta - theta_prev) + (y - x' theta)^2,
    A = D G D + (1 - FORGETTING) * FLOOR_INFORMATION * I,   then G <- A + x x'

- **Non-negative** coefficients: predictions use the projection of theta onto theta >= 0 in the
  metric G (a small active-set solve), so no work costs negative time. Steps that barely vary
  (the row count nearly constant, say) otherwise let a fit trade a huge constant against a
  negative per-row cost, which predicts nonsense for the next step. The recursion itself stays
  unconstrained: clamping RLS coefficients inside the recursion breaks its bookkeeping (the
  information says "known" about a value the data never supported) and biases it for good.
- **Directional forgetting**: D discounts (factor FORGETTING) only what a step measures, i.e. the
  features it has non-zero. The fit follows a machine that gets busier or quieter, and a long
  decode-only stretch does not erase what prefill steps taught it. Because the update is centred
  on theta_prev, forgetting never moves the coefficients by itself (a fit that already explains
  the data stays put).
- **No wind-up**: the last term of A is an information floor: however alike the steps (a long
  decode-only stretch excites one direction only), G's eigenvalues stay >= FLOOR_INFORMATION, so
  the covariance (G's inverse) stays bounded (trace <= NUM_FEATURES / FLOOR_INFORMATION = 500)
  and one odd step cannot swing the coefficients without bound.
- **Outliers**: a residual beyond 4 robust scales, widened by how unusual the step is (its
  leverage: a new prefill size is information, not an outlier), enters the fit clipped, so a GC
  pause or a core taken by another process does not swing the budget. A fit that goes
  non-finite starts over.

The target is a time between tokens, which is a step's duration plus the gap before the next
step starts (delivering the step's outputs, taking in new requests); the gap is measured between
back-to-back steps and subtracted from the target before the budget is sized (`step_target_ms`).

Before the fit has seen MIN_STEPS steps, MIN_PREFILL_STEPS of them with prefill, it is not ready
and the scheduler gives each step only the prefill floor (slo_min_prefill_tokens): the first
prompts teach the model their cost in small steps rather than in one long one. After that the
budget may grow to at most twice the largest prefill seen, each size checked by a measured step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from reference_server.sequence import ScheduledChunk

__all__ = [
    "FLOOR_INFORMATION",
    "FORGETTING",
    "NUM_FEATURES",
    "StepCostModel",
    "StepFeatures",
    "step_features",
]

NUM_FEATURES = 5
MIN_STEPS = 16
MIN_PREFILL_STEPS = 4
# Scales that bring each feature to about 1 on a busy step (conditioning of the fit only).
_SCALES = np.array([1.0, 64.0, 1024.0, 16384.0, 1024.0 * 2048.0])
FORGETTING = 0.995  # a measured direction's weight halves after ~140 steps that measure it
# The information floor added each step: G's eigenvalues stay >= FLOOR_INFORMATION (scaled
# units), against ~1 / (1 - FORGETTING) = 200 times a feature's square along a direction the steps
# excite. 1.0 measurably biased the rarely-excited prefill-attention coefficient (2x after 400
# steps); 0.01 biases it < 1% and still bounds the covariance's trace at 500.
FLOOR_INFORMATION = 0.01
_FLOOR = (1.0 - FORGETTING) * FLOOR_INFORMATION
_CLIP_SCALES = 4.0
_GAP_WEIGHT = 0.05
_FIRST_GAPS = 8
_GROWTH = 2


@dataclass(frozen=True, slots=True)
class StepFeatures:
    """The work of one step, in the model's raw units."""

    rows: int
    prefill_tokens: int
    context_tokens: int
    prefill_attention: int

    def vector(self) -> np.ndarray:
        raw = (1.0, self.rows, self.prefill_tokens, self.context_tokens, self.prefill_attention)
        return np.array(raw, dtype=np.float64) / _SCALES


def step_features(chunks: Iterable[ScheduledChunk]) -> StepFeatures:
    """The features of a step that ran `chunks` (read before num_computed_tokens advances)."""
    rows = prefill = context = attention = 0
    for chunk in chunks:
        rows += 1
        start = chunk.seq.num_computed_tokens
        end = start + chunk.num_new_tokens
        context += end
        if chunk.num_new_tokens > 1 or start < chunk.seq.prefill_end:
            prefill += chunk.num_new_tokens
            attention += chunk.num_new_tokens * end
    return StepFeatures(rows, prefill, context, attention)


def _nonnegative_solve(gram: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """argmin over theta >= 0 of theta'G theta - 2 m'theta (G positive definite): solve on the
    free set, drop the most negative coefficient, repeat (at most NUM_FEATURES solves). Not an
    exact NNLS (a dropped coefficient is not re-admitted), which is fine here: the step after
    starts again from all five free."""
    free = list(range(len(moments)))
    theta = np.zeros(len(moments))
    while free:
        sub = np.linalg.solve(gram[np.ix_(free, free)], moments[free])
        if (sub >= 0).all():
            theta[free] = sub
            return theta
        del free[int(np.argmin(sub))]
    return theta


class StepCostModel:
    """Online model of step duration (milliseconds) from StepFeatures."""

    def __init__(self) -> None:
        self.num_resets = -1
        # EMA of the time between one step's end and the next one's start while sequences keep
        # running (delivering outputs, admitting requests): part of every running request's
        # time between tokens that no step feature explains. Kept across resets.
        self.gap_ms: float | None = None
        self._first_gaps: list[float] = []
        self.reset()

    def reset(self) -> None:
        self._information = np.zeros((NUM_FEATURES, NUM_FEATURES))  # G
        self._theta_free = np.zeros(NUM_FEATURES)  # the unconstrained recursion's estimate
        self._theta = np.zeros(NUM_FEATURES)  # its projection onto theta >= 0 (what predicts)
        self._covariance: np.ndarray | None = None  # G's inverse, for leverage
        self._residual_scale = 0.0  # EMA of |clipped residual| (ms), the clip's unit
        self.num_steps = 0
        self.num_prefill_steps = 0
        self.max_prefill_seen = 0
        self.num_resets += 1
        self.mean_abs_error_ms: float | None = None  # EMA of |actual - predicted| once ready

    @property
    def ready(self) -> bool:
        return self.num_steps >= MIN_STEPS and self.num_prefill_steps >= MIN_PREFILL_STEPS

    @property
    def coefficients(self) -> tuple[float, ...]:
        """Milliseconds per unit of each raw feature (constant, row, prefill token, context
        token, prefill-attention unit)."""
        return tuple(float(c) for c in self._theta / _SCALES)

    @property
    def covariance_trace(self) -> float:
        """Trace of the coefficients' covariance (scaled units); at most NUM_FEATURES /
        FLOOR_INFORMATION once the first step is in (the information floor), inf before."""
        return math.inf if self._covariance is None else float(np.trace(self._covariance))

    def predict_ms(self, features: StepFeatures) -> float:
        """Predicted duration. The coefficients are never negative, so more work never predicts
        less time and the budget search stays monotone."""
        return float(self._theta @ features.vector())

    def observe(self, features: StepFeatures, duration_ms: float) -> None:
        if not math.isfinite(duration_ms) or duration_ms < 0:
            return
        x = features.vector()
        if not np.isfinite(x).all():
            self.reset()
            return
        with np.errstate(over="ignore", invalid="ignore"):
            predicted = float(self._theta @ x)
            leverage = None if self._covariance is None else float(x @ self._covariance @ x)
        if not math.isfinite(predicted) or (leverage is not None and not math.isfinite(leverage)):
            self.reset()  # work so far outside anything seen that the fit cannot weigh it
            return
        residual = duration_ms - predicted
        if self.ready:
            error = abs(residual)
            mean = self.mean_abs_error_ms
            self.mean_abs_error_ms = error if mean is None else 0.95 * mean + 0.05 * error
        scale = self._residual_scale
        clipped = residual
        if self.num_steps >= MIN_STEPS and scale > 0 and leverage is not None:
            limit = _CLIP_SCALES * scale * math.sqrt(1.0 + max(0.0, leverage))
            clipped = max(-limit, min(limit, residual))
        self._residual_scale = abs(clipped) if scale == 0 else 0.95 * scale + 0.05 * abs(clipped)
        # Forget only along the features this step measures (D G D, D = sqrt(FORGETTING) there),
        # keep the information floor, then add this step.
        discount = np.where(x != 0, math.sqrt(FORGETTING), 1.0)
        prior = self._information * np.outer(discount, discount)
        prior += np.eye(NUM_FEATURES) * _FLOOR
        information = prior + np.outer(x, x)
        target = predicted + clipped
        try:
            theta_free = np.linalg.solve(information, prior @ self._theta_free + x * target)
            # The projection onto theta >= 0 in the information metric: the recursion above
            # stays unconstrained (consistent bookkeeping), only the predictions are clamped.
            theta = _nonnegative_solve(information, information @ theta_free)
            covariance = np.linalg.inv(information)
        except np.linalg.LinAlgError:
            self.reset()
            return
        if not all(np.isfinite(a).all() for a in (theta_free, theta, covariance)):
            self.reset()
            return
        self._information, self._covariance = information, covariance
        self._theta_free, self._theta = theta_free, theta
        self.num_steps += 1
        if features.prefill_tokens:
            self.num_prefill_steps += 1
            self.max_prefill_seen = max(self.max_prefill_seen, features.prefill_tokens)

    def observe_gap(self, gap_ms: float) -> None:
        """The time between two back-to-back steps (the engine never waits idle between them
        while sequences run): the median of the first 8, then an EMA into which a gap over 4x
        the estimate (a GC pause, a stolen core) enters clipped."""
        if not math.isfinite(gap_ms) or gap_ms < 0:
            return
        if len(self._first_gaps) < _FIRST_GAPS:
            # The median of the first few: one GC pause among them does not set the estimate.
            self._first_gaps.append(gap_ms)
            self.gap_ms = float(np.median(self._first_gaps))
            return
        assert self.gap_ms is not None
        clipped = min(gap_ms, 4.0 * self.gap_ms + 0.1)
        self.gap_ms += _GAP_WEIGHT * (clipped - self.gap_ms)

    def step_target_ms(self, between_tokens_ms: float) -> float:
        """The step duration that leaves a time between tokens of `between_tokens_ms` once the
        gap between steps is added (may be <= 0: then only the prefill floor runs)."""
        return between_tokens_ms - (self.gap_ms or 0.0)

    @staticmethod
    def planned_features(
        decode_rows: int, decode_context: int, prefill_start: int, prefill_tokens: int
    ) -> StepFeatures:
        """A planned step's features: the decodes plus one prefill chunk at `prefill_start`."""
        end = prefill_start + prefill_tokens
        rows = decode_rows + (1 if prefill_tokens else 0)
        context = decode_context + (end if prefill_tokens else 0)
        return StepFeatures(rows, prefill_tokens, context, prefill_tokens * end)

    def max_prefill_tokens(
        self,
        *,
        target_ms: float,
        decode_rows: int,
        decode_context: int,
        prefill_start: int,
        limit: int,
    ) -> int:
        """The most prefill tokens (0..limit) a step may add to `decode_rows` decodes (reading
        `decode_context` tokens) and stay within `target_ms`, for a prefill chunk starting at
        position `prefill_start`. 0 when the decodes alone exceed the target."""

        def predicted(tokens: int) -> float:
            return self.predict_ms(
                self.planned_features(decode_rows, decode_context, prefill_start, tokens)
            )

        if predicted(0) > target_ms:
            return 0
        # Trust the fit only near what it has seen: at most twice the largest prefill observed,
        # so the budget grows geometrically, each size checked against a measured step, instead
        # of extrapolating a fit made on small chunks to a 2,000-token one.
        limit = min(limit, _GROWTH * max(1, self.max_prefill_seen))
        low, high = 0, limit  # predicted(low) <= target; find the largest such
        if predicted(high) <= target_ms:
            return high
        while high - low > 1:
            mid = (low + high) // 2
            if predicted(mid) <= target_ms:
                low = mid
            else:
                high = mid
        return low
