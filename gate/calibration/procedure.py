"""What a calibration sends (docs/calibration.md): `CalibrationSpec`.

Owns the lone phase's length and pause, the capacity sweep's rule (first users, growth, most
users, plateau share, error share, time budget), how a slow target's phases lengthen, the
request mix (prompt and answer lengths), and the closed-loop profile overrides one phase runs
with. calibration.json records it under `spec` (and in `identity`, so a saved calibration is
reused only for the same spec). It does not run anything (`gate.orchestrator.calibration`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["CalibrationSpec"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalibrationSpec:
    """What a calibration sends: the short class of the default profiles, unless told."""

    lone_seconds: float = 3.0
    # The lone user pauses this long after each answer, so every request finds the server idle,
    # as a night-trickle request does. Back to back, the server never sleeps between requests:
    # on a VM a request arriving at an idle server paid 14-16 ms TTFT against 5 ms back to back
    # (the wake-ups of idle CPUs and processes), so a reference measured back to back taxed the
    # trickle gate with the machine's idle behaviour instead of the batching's.
    lone_think_seconds: float = 0.1
    capacity_seconds: float = 4.0  # the shortest capacity step
    # The capacity sweep (gate.orchestrator.capacity_sweep, docs/calibration.md): closed-loop
    # users double from `capacity_start_users` until output tokens/s grows by less than
    # `plateau_share` over the best step before, 429s or failures above `capacity_error_share`
    # appear, the target's stated limit is reached, the load generator saturates, the next step
    # would pass `capacity_budget_seconds`, or `capacity_max_users` is reached. A fixed 64
    # users underestimated any target that runs more sequences at once (vLLM's default 256).
    capacity_start_users: int = 16
    capacity_growth: int = 2
    capacity_max_users: int = 2048
    plateau_share: float = 0.10
    capacity_error_share: float = 0.01
    capacity_budget_seconds: float = 300.0
    # A slow target gets longer phases, so that it yields as many samples as a fast one: the
    # lone phase runs until `min_lone_requests` are done (in units of the first phase's E2E),
    # a capacity step for at least `capacity_e2e_multiple` E2Es of the load it meets (the lone
    # E2E, or the previous step's when the target queues).
    min_lone_requests: int = 12
    capacity_e2e_multiple: float = 10.0
    # A step is measured again, longer, when it completed fewer than this many requests per
    # user: a target whose concurrency limit is far below the step's users (llama.cpp's few
    # slots) queues most of them, and a step sized in E2Es is too short for a stable rate.
    capacity_requests_per_user: float = 4.0
    max_phase_seconds: float = 120.0
    # The highest client CPU (share of one core) a phase may show and stay a valid measurement;
    # None: the load generator's own limit (loadgen's `max_client_cpu_ratio`).
    max_client_cpu_ratio: float | None = None
    prompt_tokens: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"kind": "uniform", "low": 16, "high": 64}
    )
    output_tokens: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"kind": "uniform", "low": 8, "high": 16}
    )

    def __post_init__(self) -> None:
        if not (self.lone_seconds > 0 and self.capacity_seconds > 0):
            raise ValueError("calibration phases need a positive duration")
        if not (2 <= self.capacity_start_users <= self.capacity_max_users):
            raise ValueError("capacity users: 2 <= capacity_start_users <= capacity_max_users")
        if self.capacity_growth < 2:
            raise ValueError("capacity_growth must be >= 2")
        if not (0 < self.plateau_share < 1 and 0 <= self.capacity_error_share < 1):
            raise ValueError("plateau_share must be in (0, 1), capacity_error_share in [0, 1)")
        if not self.capacity_budget_seconds > 0:
            raise ValueError("capacity_budget_seconds must be > 0")
        if self.max_client_cpu_ratio is not None and not self.max_client_cpu_ratio > 0:
            raise ValueError("max_client_cpu_ratio must be > 0")

    def mean_request_tokens(self) -> float:
        """Mean prompt + answer tokens of the mix (uniform ranges; 0 when not uniform)."""
        total = 0.0
        for dist in (self.prompt_tokens, self.output_tokens):
            if dist.get("kind") != "uniform":
                return 0.0
            total += (float(dist["low"]) + float(dist["high"])) / 2
        return total

    def overrides(self, *, users: int, seconds: float, think: float = 0.0) -> dict[str, Any]:
        limit = (
            {}
            if self.max_client_cpu_ratio is None
            else {"max_client_cpu_ratio": self.max_client_cpu_ratio}
        )
        return {
            **limit,
            "mode": "closed",
            "users": users,
            # The load generator holds at most max_concurrency requests in flight (256 unless
            # told): a closed loop of more users would silently measure 256.
            "max_concurrency": users,
            "duration_seconds": seconds,
            "think_time_seconds": think,
            "warmup_seconds": 0.0,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            # Closed-loop users send the moment the previous answer ends: there is no schedule
            # to lag behind, so only a saturated client (CPU) invalidates the phase.
            "max_schedule_lag_p99_seconds": 3600.0,
        }
