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
define the file (`gate.calibration`: its typed content, reader, writer and phase rules) nor
decide what the numbers are used for (`gate.orchestrator.relative`, `gate.verdicts.relative`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from gate.calibration.content import (
    CALIBRATION_FILE,
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    CalibrationError,
    Distribution,
    parse_calibration,
)
from gate.calibration.json_io import write_calibration
from gate.calibration.procedure import CalibrationSpec
from gate.errors import BatchgateError
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

__all__ = ["CalibrationFault", "calibrate", "kv_capacity"]

_PROFILE = "steady"  # the load generator's single-class profile; its rate is unused (closed)


class CalibrationFault(CalibrationError):
    """A calibration phase ended like a faulted profile (target died, Ctrl-C, load crashed):
    the run ends with that fault, as if a profile had."""

    def __init__(self, fault: RunFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


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


def _distribution(run: RunData, metric: str) -> Distribution | None:
    profile = run.profiles[_PROFILE]
    got = measure(profile, metric, "p50", Scope(), slos=None, settings=None, warmup_seconds=0.0)
    values = getattr(got, "values", None)
    if values is None or len(values) == 0:
        return None
    values = np.asarray(values, dtype=np.float64)
    return Distribution(
        p50=float(np.quantile(values, 0.5)), p90=float(np.quantile(values, 0.9)), n=len(values)
    )


def _unloaded(lone: RunData) -> tuple[dict[str, Distribution | None], Distribution]:
    """The lone phase's distributions, and its E2E's; no TTFT or E2E: CalibrationError."""
    unloaded = {m: _distribution(lone, m) for m in ("ttft", "e2e", "tpot", "itl")}
    e2e = unloaded["e2e"]
    if e2e is None or unloaded["ttft"] is None:
        raise CalibrationError("calibration (lone): no successful request")
    return unloaded, e2e


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
        # The load generator's processes: under --workers auto the run's profiles use the
        # capacity phase's count.
        "workers": load.get("workers"),
    }


def _advice(settings: SessionSettings) -> str:
    """What a user can do about a load generator that saturated with `settings`' workers."""
    workers = settings.load_workers
    if settings.max_load_workers is None:
        return (
            f"Give the load generator more processes (--workers {2 * workers}, or --workers auto)"
        )
    return (
        f"--workers auto already runs {workers}, one per CPU this machine lets it use: drive "
        "the target from a machine with more CPUs"
    )


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
) -> Calibration:
    """Measure the target, write `<run_dir>/calibration.json` and return it."""
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
    unloaded, lone_e2e = _unloaded(lone)
    if (lone_e2e.n or 0) < spec.min_lone_requests:
        # A slow target: measure again for long enough to get the samples a fast one gives.
        per_request = (lone_e2e.p50 or 0.0) + think
        seconds = min(spec.max_phase_seconds, 1.2 * spec.min_lone_requests * per_request)
        lone = _phase("lone-long", spec.overrides(users=1, seconds=seconds, think=think),
                      **common)  # fmt: skip
        unloaded, lone_e2e = _unloaded(lone)
    kv = _kv_capacity(target)
    limit = stated_limit(target, kv, spec.mean_request_tokens())

    runs: dict[str, RunData] = {}

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        runs[phase] = _phase(phase, spec.overrides(users=users, seconds=seconds), **common)
        return step_figures(runs[phase], users=users, seconds=seconds, phase=phase)

    def widen(step: StepFigures) -> int | None:
        # --workers auto: a saturated load generator gets twice the processes, up to one a CPU.
        now: SessionSettings = common["settings"]
        ceiling = now.max_load_workers
        if ceiling is None or now.load_workers >= ceiling:
            return None
        more = min(ceiling, 2 * now.load_workers)
        common["settings"] = dataclasses.replace(now, load_workers=more)
        view.message(
            f"batchgate: the load generator saturated at {step.users} users with "
            f"{now.load_workers} worker(s); measuring again with {more} (--workers auto)"
        )
        return more

    swept = sweep(
        measure=measure, spec=spec, lone_e2e=lone_e2e.p50 or 0.0, limit=limit, widen=widen
    )
    view.message(
        "batchgate: capacity curve: "
        + ", ".join(f"{s.users} users {s.output_tokens_per_second:.0f} tok/s" for s in swept.curve)
        + f"; stopped: {swept.detail}"
    )
    if swept.stop == "client saturated":
        advice = _advice(common["settings"])
        view.message(f"batchgate: the capacity could not be measured: {swept.detail}. {advice}")
    loaded = runs[swept.chosen.phase]
    users = swept.chosen.users
    data = {
        "schema_version": CALIBRATION_SCHEMA_VERSION,
        "identity": identity,
        "spec": dataclasses.asdict(spec),
        "unloaded": {"short": {k: v.to_json() for k, v in unloaded.items() if v is not None}},
        "capacity": {"short": _capacity(loaded, users)},
        "capacity_sweep": swept.to_json(),
        "kv_capacity": kv,
        "client": {"lone": _client(lone), "capacity": _client(loaded)},
        "took_seconds": round(time.monotonic() - started, 3),
        "measured_at": time.time(),
    }
    calibration = parse_calibration(data)
    write_calibration(run_dir / CALIBRATION_FILE, calibration)
    return calibration
