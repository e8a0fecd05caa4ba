"""The capacity sweep: closed-loop concurrency grows until the target saturates (the curve).

Owns the schedule of concurrency steps (doubling from `capacity_start_users`, clipped to the
target's stated limit), the per-step figures (output tokens/s, completed requests/s, E2E median,
failures, 429s, the load generator's validity), the stop rule (plateau, errors, stated limit,
client saturated, time budget, most users), a saturated load generator's second try with more
workers when the caller can give them (`--workers auto`), and the knee; and reading the
target's stated concurrency limit where it exposes one (our /admin/batching, a llama.cpp /props
slot count, a `max_num_seqs` label on a `*config_info` sample, else the KV capacity over a
request's tokens).
After guidellm's sweep (a synchronous pass, then a throughput pass: here the lone phase, then this
sweep of throughput passes) and AIPerf's adaptive search (a geometric concurrency range, stopped
on an improvement plateau). It does not run the load generator (the caller's `measure`) nor
write calibration.json (`gate.orchestrator.calibration`); docs/calibration.md states the rule.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gate.calibration.procedure import CalibrationSpec
from gate.errors import BatchgateError
from gate.orchestrator.target import TargetClient
from gate.rundir.run import RunData

__all__ = [
    "STOP_REASONS",
    "StepClient",
    "StepFigures",
    "SweepResult",
    "Widen",
    "stated_limit",
    "step_figures",
    "sweep",
]

PROFILE = "steady"  # the load generator's single-class profile the calibration runs

STOP_REASONS = (
    "plateau",  # output tokens/s grew by less than the stated share over the best before
    "errors",  # 429s, or failed requests above the stated share
    "limit",  # the target's stated concurrency limit was reached
    "client saturated",  # the load generator measured itself: no valid figure past this step
    "time budget",  # the next step would not fit in the sweep's time budget
    "max users",  # the sweep's own ceiling (capacity_max_users)
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepClient:
    client_valid: bool  # load.json's measurement_valid
    client_cpu_ratio: float | None  # the step's highest sample, of one core
    client_reasons: tuple[str, ...]
    workers: int = 1  # the load generator's processes (load.json `workers`)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepFigures:
    """One point of the curve: `users` closed-loop users for `seconds`."""

    users: int
    seconds: float
    phase: str  # the directory under <run>/calibration/
    completed: int
    output_tokens_per_second: float
    rps: float
    e2e_p50: float | None
    failed: int  # records whose status is not ok (429s included)
    rate_limited: int  # HTTP 429
    records: int
    client_valid: bool
    client_cpu_ratio: float | None  # the step's highest sample, of one core
    client_reasons: tuple[str, ...]
    workers: int = 1  # the load generator's processes (load.json `workers`)

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["client_reasons"] = list(self.client_reasons)
        return out


def step_figures(run: RunData, *, users: int, seconds: float, phase: str) -> StepFigures:
    """The figures of one step: throughput over the completions after the first quarter of
    the step (every user starts at once, so the first answers come in a wave)."""
    profile = run.profiles[PROFILE]
    load = profile.load or {}
    ratio = (load.get("client_cpu_ratio") or {}).get("max")  # load.json: {"mean", "max"}
    workers = load.get("workers")
    client = StepClient(
        client_valid=bool(load.get("measurement_valid")),
        client_cpu_ratio=float(ratio) if isinstance(ratio, (int, float)) else None,
        client_reasons=tuple(str(r) for r in load.get("invalid_reasons") or ()),
        workers=workers if isinstance(workers, int) and workers >= 1 else 1,
    )
    req = profile.requests
    if req is None or req.n == 0:
        return StepFigures(
            users=users, seconds=seconds, phase=phase, completed=0,
            output_tokens_per_second=0.0, rps=0.0, e2e_p50=None, failed=0, rate_limited=0,
            records=0, **dataclasses.asdict(client),
        )  # fmt: skip
    ok = req.status.mask(("ok",))
    ok = np.ones(req.n, dtype=bool) if ok is None else ok
    done = req.done_at[ok]
    finished = ~np.isnan(done)
    done = done[finished]
    tokens = np.nan_to_num(req.output_tokens[ok][finished])
    e2e = done - req.sent_at[ok][finished]
    tps = rps = 0.0
    if len(done) >= 2:
        start = float(np.nanmin(req.sent_at))
        end = float(np.max(done))
        begin = start + 0.25 * (end - start)
        inside = done > begin
        span = end - begin
        if span > 0:
            rps = float(inside.sum()) / span
            tps = float(tokens[inside].sum()) / span
    return StepFigures(
        users=users,
        seconds=seconds,
        phase=phase,
        completed=len(done),
        output_tokens_per_second=tps,
        rps=rps,
        e2e_p50=float(np.median(e2e)) if len(e2e) else None,
        failed=int(req.n - int(ok.sum())),
        rate_limited=int(np.sum(req.http_status == 429)),
        records=int(req.n),
        **dataclasses.asdict(client),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepResult:
    curve: tuple[StepFigures, ...]
    chosen: StepFigures  # the step whose throughput is the capacity
    stop: str  # one of STOP_REASONS
    detail: str  # the stop in words
    knee_users: int  # the fewest users that gave (1 - plateau share) of the best tokens/s
    limit: dict[str, Any]  # {"users": int | None, "source": str}

    def to_json(self) -> dict[str, Any]:
        return {
            "curve": [step.to_json() for step in self.curve],
            "capacity_users": self.chosen.users,
            "capacity_phase": self.chosen.phase,
            "knee_users": self.knee_users,
            "stop": self.stop,
            "detail": self.detail,
            # A plateau, errors or the stated limit: the target saturated. The other stops leave
            # the capacity a lower bound (the client, the time budget or the ceiling came first).
            "saturated": self.stop in ("plateau", "errors", "limit"),
            "limit": dict(self.limit),
        }


# (phase name, users, seconds) -> that step's figures (the caller keeps its records)
Measure = Callable[[str, int, float], StepFigures]
# A step whose load generator saturated -> the worker count it may be measured again with
# (`--workers auto`), or None when the load generator cannot grow (a fixed count, the ceiling).
Widen = Callable[[StepFigures], int | None]


def _wanted_seconds(spec: CalibrationSpec, reference_e2e: float) -> float:
    return min(
        spec.max_phase_seconds,
        max(spec.capacity_seconds, spec.capacity_e2e_multiple * reference_e2e),
    )


def _measure_step(
    measure: Measure, spec: CalibrationSpec, users: int, seconds: float, suffix: str = ""
) -> StepFigures:
    figures = measure(f"capacity-{users}{suffix}", users, seconds)
    wanted = spec.capacity_requests_per_user * users
    if figures.completed < wanted and figures.rps > 0 and figures.client_valid:
        # Too few answers per user for a stable rate (a target whose limit is below `users`
        # queues most of them, or answers slowly): again, as long as the rate just seen takes.
        seconds = min(spec.max_phase_seconds, 1.3 * wanted / figures.rps)
        figures = measure(f"capacity-{users}{suffix}-long", users, seconds)
    return figures


def _errors(step: StepFigures, share: float) -> str | None:
    if step.rate_limited:
        return f"{step.rate_limited} of {step.records} requests answered HTTP 429"
    if step.records and step.failed > share * step.records:
        return f"{step.failed} of {step.records} requests failed"
    return None


def sweep(
    *,
    measure: Measure,
    spec: CalibrationSpec,
    lone_e2e: float,
    limit: Mapping[str, Any],
    clock: Callable[[], float] = time.monotonic,
    widen: Widen | None = None,
) -> SweepResult:
    """Run the steps until one of STOP_REASONS; the capacity is the best valid step's.

    A step whose load generator saturated is measured again with more workers while `widen`
    gives them (`--workers auto`); the saturated step stays in the curve, marked invalid."""
    started = clock()
    suffix = ""  # phase names after a widening say the worker count: capacity-64-w2
    stated = limit.get("users")
    users = spec.capacity_start_users if stated is None else min(spec.capacity_start_users, stated)
    users = max(2, users)
    curve: list[StepFigures] = []
    stop, detail = "max users", f"reached {spec.capacity_max_users} users"
    while True:
        # A step lasts a few E2Es of the load it meets: the lone E2E, or the last step's E2E
        # times the growth when the target is already queueing.
        previous = curve[-1].e2e_p50 if curve and curve[-1].e2e_p50 else lone_e2e
        seconds = _wanted_seconds(spec, max(lone_e2e, previous))
        if curve and clock() - started + seconds > spec.capacity_budget_seconds:
            stop = "time budget"
            detail = (
                f"a {users}-user step ({seconds:.0f} s) would pass the sweep's budget of "
                f"{spec.capacity_budget_seconds:.0f} s"
            )
            break
        step = _measure_step(measure, spec, users, seconds, suffix)
        best = max((s.output_tokens_per_second for s in curve if s.client_valid), default=0.0)
        curve.append(step)
        if not step.client_valid:
            more = None if widen is None else widen(step)
            if more is not None:
                suffix = f"-w{more}"
                continue  # the same users again, with more load-generator processes
            stop = "client saturated"
            reasons = "; ".join(step.client_reasons) or "measurement not valid"
            processes = f"{step.workers} worker{'s' if step.workers != 1 else ''}"
            detail = f"the load generator saturated at {users} users with {processes} ({reasons})"
            break
        problem = _errors(step, spec.capacity_error_share)
        if problem is not None:
            stop, detail = "errors", f"{problem} at {users} users"
            break
        if len(curve) > 1 and step.output_tokens_per_second < (1 + spec.plateau_share) * best:
            stop = "plateau"
            detail = (
                f"{users} users gave {step.output_tokens_per_second:.0f} output tokens/s, less "
                f"than {1 + spec.plateau_share:g}x the best before ({best:.0f})"
            )
            break
        if stated is not None and users >= stated:
            stop, detail = "limit", f"reached the target's limit of {stated} ({limit['source']})"
            break
        if users >= spec.capacity_max_users:
            break
        users = min(users * spec.capacity_growth, spec.capacity_max_users)
        if stated is not None:
            users = min(users, stated)
    valid = [s for s in curve if s.client_valid] or curve
    chosen = max(valid, key=lambda s: s.output_tokens_per_second)
    if stop == "client saturated":
        chosen = curve[-1]  # fails closed: the capacity carries the invalid client
    top = chosen.output_tokens_per_second
    knee = next(
        (s.users for s in valid if s.output_tokens_per_second >= (1 - spec.plateau_share) * top),
        chosen.users,
    )
    return SweepResult(
        curve=tuple(curve),
        chosen=chosen,
        stop=stop,
        detail=detail,
        knee_users=knee,
        limit=dict(limit),
    )


def _config_info_seqs(samples: Mapping[str, list[tuple[dict[str, str], float]]]) -> int | None:
    """A `max_num_seqs` label on any `*config_info` sample (vLLM's info gauges carry their
    config as labels; `cache_config_info` has none of the scheduler's, a later one may)."""
    for name, values in samples.items():
        if not name.endswith("config_info"):
            continue
        for labels, _ in values:
            raw = labels.get("max_num_seqs")
            try:
                seqs = int(float(raw)) if raw is not None else 0
            except ValueError:
                continue
            if seqs > 0:
                return seqs
    return None


def stated_limit(
    target: TargetClient, kv: Mapping[str, Any], request_tokens: float
) -> dict[str, Any]:
    """The most requests the target says it runs at once, the lowest of what it states, with
    where it was read; {"users": None, "source": "not stated"} when it states nothing."""
    found: list[tuple[int, str]] = []
    try:
        batching = target.batching()
    except BatchgateError:
        batching = None
    seqs = (batching or {}).get("max_num_seqs")
    if isinstance(seqs, int) and not isinstance(seqs, bool) and seqs > 0:
        found.append((seqs, "/admin/batching max_num_seqs"))
    context = target.llamacpp_context()
    if context is not None:
        found.append((context[1], "llama.cpp /props total_slots"))
    try:
        samples = target.raw_samples()
    except BatchgateError:
        samples = {}
    seqs = _config_info_seqs(samples)
    if seqs is not None:
        found.append((seqs, "/metrics *config_info max_num_seqs"))
    tokens = kv.get("tokens")
    if isinstance(tokens, int) and tokens > 0 and request_tokens > 0:
        # Past this many the KV cache holds no more requests of the calibration's mix at once.
        found.append(
            (
                max(1, math.floor(tokens / request_tokens)),
                f"KV capacity {tokens} tokens / {request_tokens:g} tokens a request",
            )
        )
    if not found:
        return {"users": None, "source": "not stated"}
    users, source = min(found)
    return {"users": users, "source": source, "all": [list(f) for f in found]}
