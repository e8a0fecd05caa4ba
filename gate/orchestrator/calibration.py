"""Calibration of a target: its unloaded service time and saturation capacity (calibration.json).

Owns the two measurement phases that relative profiles ("0.3x capacity") and relative
thresholds ("< 4x unloaded") resolve against, both driven by the real load generator (its
closed-loop mode, so timing is the same client as the run's), into `<run>/calibration/`:
- lone: one user sends short requests, pausing after each answer, for a few seconds: TTFT,
  E2E, TPOT, ITL medians and 90th percentiles of a request that finds the server idle;
- capacity: closed-loop users grow (doubling from 16) until the target saturates
  (`gate.orchestrator.capacity_sweep`: the curve, the stop rule, the stated limit); the best
  step's completed requests/s and output tokens/s, with the spread over three sub-windows as
  the uncertainty.
It also reads the KV capacity where the target tells it (the bundled server's block gauge).
Approach after guidellm's `sweep` (a synchronous pass, then throughput passes). It does not
decide what the numbers are used for (`gate.orchestrator.relative`, `gate.verdicts.relative`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from gate.errors import BatchgateError, ExitCode
from gate.gates.spec import GatesFile, Scope
from gate.metrics.derive import measure
from gate.orchestrator.capacity_sweep import StepFigures, stated_limit, step_figures, sweep
from gate.orchestrator.faults import RunFault
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import ProfilePlan, resolve_plans
from gate.orchestrator.processes import ChildProcess
from gate.orchestrator.session import ProfileSession, SessionSettings
from gate.orchestrator.target import TargetClient
from gate.rundir.run import RunData, RunDirError, load_run

__all__ = [
    "CALIBRATION_FILE",
    "CALIBRATION_SCHEMA_VERSION",
    "CalibrationError",
    "CalibrationFault",
    "CalibrationSpec",
    "calibrate",
    "kv_capacity",
    "read_calibration",
]

CALIBRATION_FILE = "calibration.json"
CALIBRATION_SCHEMA_VERSION = 1
_PROFILE = "steady"  # the load generator's single-class profile; its rate is unused (closed)


class CalibrationError(BatchgateError):
    """The target could not be calibrated (no successful request, target died): no data."""

    default_exit_code = ExitCode.NO_DATA


class CalibrationFault(CalibrationError):
    """A calibration phase ended like a faulted profile (target died, Ctrl-C, load crashed):
    the run ends with that fault, as if a profile had."""

    def __init__(self, fault: RunFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


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

    def mean_request_tokens(self) -> float:
        """Mean prompt + answer tokens of the mix (uniform ranges; 0 when not uniform)."""
        total = 0.0
        for dist in (self.prompt_tokens, self.output_tokens):
            if dist.get("kind") != "uniform":
                return 0.0
            total += (float(dist["low"]) + float(dist["high"])) / 2
        return total

    def overrides(self, *, users: int, seconds: float, think: float = 0.0) -> dict[str, Any]:
        return {
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


def _phase(
    name: str,
    overrides: dict[str, Any],
    *,
    run_dir: Path,
    gates_file: GatesFile,
    target: TargetClient,
    server: ChildProcess | None,
    has_step_records: bool,
    settings: SessionSettings,
    view: LiveView,
    children: list[ChildProcess],
) -> RunData:
    empty = dataclasses.replace(gates_file, profiles={}, gates=())
    (plan,) = resolve_plans(
        [_PROFILE], empty, scale=settings.scale, extra_overrides={_PROFILE: overrides}
    )
    directory = run_dir / "calibration" / name
    view.message(f"batchgate: calibrating the target ({name})")
    session = ProfileSession(
        plan=ProfilePlan(name=_PROFILE, overrides=plan.overrides, params=plan.params),
        run_dir=directory,
        target=target,
        server=server,
        has_step_records=has_step_records,
        settings=settings,
        view=view,
        index=1,
        total=1,
        children=children,
        gates_file=empty,
    )
    outcome = session.run()
    if outcome.fault is not None:
        raise CalibrationFault(dataclasses.replace(outcome.fault, profile=f"calibration ({name})"))
    try:
        return load_run(directory)
    except RunDirError as exc:
        raise CalibrationError(f"calibration ({name}) left no readable records: {exc}") from exc


def _distribution(run: RunData, metric: str) -> dict[str, Any] | None:
    profile = run.profiles[_PROFILE]
    got = measure(profile, metric, "p50", Scope(), slos=None, settings=None, warmup_seconds=0.0)
    values = getattr(got, "values", None)
    if values is None or len(values) == 0:
        return None
    values = np.asarray(values, dtype=np.float64)
    return {
        "p50": float(np.quantile(values, 0.5)),
        "p90": float(np.quantile(values, 0.9)),
        "n": len(values),
    }


def _capacity(run: RunData, users: int) -> dict[str, Any]:
    req = run.profiles[_PROFILE].requests
    if req is None or req.n == 0:
        raise CalibrationError("calibration (capacity): no request records")
    ok = req.status.mask(("ok",))
    ok = np.ones(req.n, dtype=bool) if ok is None else ok
    done = req.done_at[ok]
    tokens = np.nan_to_num(req.output_tokens[ok])
    if len(done) < 2 * users:
        raise CalibrationError(
            f"calibration (capacity): only {len(done)} requests completed with {users} users"
        )
    # Skip the ramp (the first quarter of the phase): every user starts at once, so the first
    # completions come in a wave; then three sub-windows give the spread.
    start = float(np.nanmin(req.sent_at))
    end = float(np.nanmax(done))
    begin = start + 0.25 * (end - start)
    edges = np.linspace(begin, end, 4)
    rates, token_rates = [], []
    for lo, hi in itertools.pairwise(edges):
        inside = (done > lo) & (done <= hi)
        rates.append(float(inside.sum()) / (hi - lo))
        token_rates.append(float(tokens[inside].sum()) / (hi - lo))
    inside = done > begin
    seconds = end - begin
    return {
        "rps": float(inside.sum()) / seconds,
        "rps_low": min(rates),
        "rps_high": max(rates),
        "output_tokens_per_second": float(tokens[inside].sum()) / seconds,
        "output_tokens_per_second_low": min(token_rates),
        "output_tokens_per_second_high": max(token_rates),
        "mean_output_tokens": float(np.mean(tokens[inside])) if inside.any() else math.nan,
        "users": users,
        "n": int(inside.sum()),
    }


def _client(run: RunData) -> dict[str, Any]:
    load = run.profiles[_PROFILE].load or {}
    return {
        "measurement_valid": bool(load.get("measurement_valid")),
        "reasons": list(load.get("invalid_reasons") or []),  # load.json's own key
        "client_cpu_ratio": load.get("client_cpu_ratio"),
    }


def kv_capacity(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any]:
    """KV capacity in tokens from one /metrics exposition, where the server says it: the
    bundled server's gauge, vLLM's `cache_config_info` labels (blocks x block size), SGLang's
    `max_total_num_tokens`. Else unknown (never a guess)."""

    def first(name: str) -> tuple[dict[str, str], float] | None:
        values = samples.get(name) or []
        return values[0] if values else None

    bundled = first("batchgate_kv_capacity_tokens")
    if bundled is not None:
        return {"tokens": int(bundled[1]), "source": "batchgate_kv_capacity_tokens"}
    vllm = first("vllm:cache_config_info")
    if vllm is not None:
        labels = vllm[0]
        try:
            tokens = int(float(labels["num_gpu_blocks"])) * int(float(labels["block_size"]))
        except (KeyError, ValueError):
            tokens = None
        if tokens:
            return {"tokens": tokens, "source": "vllm:cache_config_info"}
    sglang = first("sglang:max_total_num_tokens")
    if sglang is not None:
        return {"tokens": int(sglang[1]), "source": "sglang:max_total_num_tokens"}
    return {"tokens": None, "source": "unknown"}


def _kv_capacity(target: TargetClient) -> dict[str, Any]:
    try:
        samples = target.raw_samples()
    except BatchgateError:
        return {"tokens": None, "source": "unknown"}
    found = kv_capacity(samples)
    if found["tokens"] is None:
        context = target.llamacpp_context()
        if context is not None:
            # Each slot holds its own n_ctx (llama-server's default split of -c over -np). A
            # --kv-unified server gives every slot the whole cache: this then over-counts by
            # the number of slots, and the source string says how the figure was made.
            n_ctx, slots = context
            return {
                "tokens": n_ctx * slots,
                "source": f"llama.cpp /props: n_ctx {n_ctx} per slot x {slots} slots",
            }
    return found


def calibrate(
    *,
    spec: CalibrationSpec,
    run_dir: Path,
    gates_file: GatesFile,
    target: TargetClient,
    server: ChildProcess | None,
    has_step_records: bool,
    settings: SessionSettings,
    view: LiveView,
    children: list[ChildProcess],
    identity: dict[str, Any],
) -> dict[str, Any]:
    """Measure the target, write `<run_dir>/calibration.json` and return its content."""
    started = time.monotonic()
    common = {
        "run_dir": run_dir,
        "gates_file": gates_file,
        "target": target,
        "server": server,
        "has_step_records": has_step_records,
        "settings": settings,
        "view": view,
        "children": children,
    }
    think = spec.lone_think_seconds
    lone = _phase("lone", spec.overrides(users=1, seconds=spec.lone_seconds, think=think),
                  **common)  # fmt: skip
    unloaded = {m: _distribution(lone, m) for m in ("ttft", "e2e", "tpot", "itl")}
    if unloaded["e2e"] is None or unloaded["ttft"] is None:
        raise CalibrationError("calibration (lone): no successful request")
    if unloaded["e2e"]["n"] < spec.min_lone_requests:
        # A slow target: measure again for long enough to get the samples a fast one gives.
        per_request = unloaded["e2e"]["p50"] + think
        seconds = min(spec.max_phase_seconds, 1.2 * spec.min_lone_requests * per_request)
        lone = _phase("lone-long", spec.overrides(users=1, seconds=seconds, think=think),
                      **common)  # fmt: skip
        unloaded = {m: _distribution(lone, m) for m in ("ttft", "e2e", "tpot", "itl")}
        if unloaded["e2e"] is None or unloaded["ttft"] is None:
            raise CalibrationError("calibration (lone): no successful request")
    kv = _kv_capacity(target)
    limit = stated_limit(target, kv, spec.mean_request_tokens())

    runs: dict[str, RunData] = {}

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        runs[phase] = _phase(phase, spec.overrides(users=users, seconds=seconds), **common)
        return step_figures(runs[phase], users=users, seconds=seconds, phase=phase)

    lone_e2e = unloaded["e2e"]
    assert lone_e2e is not None  # checked above
    swept = sweep(measure=measure, spec=spec, lone_e2e=lone_e2e["p50"], limit=limit)
    view.message(
        "batchgate: capacity curve: "
        + ", ".join(f"{s.users} users {s.output_tokens_per_second:.0f} tok/s" for s in swept.curve)
        + f"; stopped: {swept.detail}"
    )
    if swept.stop == "client saturated":
        workers = settings.load_workers
        view.message(
            f"batchgate: the capacity could not be measured: {swept.detail}. Give the load "
            f"generator more processes (--workers {2 * workers}, or --workers auto)"
        )
    loaded = runs[swept.chosen.phase]
    users = swept.chosen.users
    data = {
        "schema_version": CALIBRATION_SCHEMA_VERSION,
        "identity": identity,
        "spec": dataclasses.asdict(spec),
        "unloaded": {"short": {k: v for k, v in unloaded.items() if v is not None}},
        "capacity": {"short": _capacity(loaded, users)},
        "capacity_sweep": swept.to_json(),
        "kv_capacity": kv,
        "client": {"lone": _client(lone), "capacity": _client(loaded)},
        "took_seconds": round(time.monotonic() - started, 3),
        "measured_at": time.time(),
    }
    write_calibration(run_dir / CALIBRATION_FILE, data)
    return data


def write_calibration(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_calibration(path: Path) -> dict[str, Any]:
    """A saved calibration.json; raises CalibrationError (usage, exit 2) when unusable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{path}: cannot read calibration: {exc}", ExitCode.USAGE) from None
    if not isinstance(data, dict) or data.get("schema_version") != CALIBRATION_SCHEMA_VERSION:
        raise CalibrationError(
            f"{path}: not a calibration.json of schema version {CALIBRATION_SCHEMA_VERSION}",
            ExitCode.USAGE,
        )
    return data
