"""The capacity search of `batchgate sweep`: the highest offered rate at which every gate passes.

Owns the search itself: a short run of one profile per rate (`rate_rps` override; the gates
scoped to that profile plus the unscoped ones), bracketing by doubling from the minimum rate up
to the maximum, then bisecting to the tolerance; a point whose verdict is inconclusive is
repeated and counts as not passing if it stays so. And the session around it (`run_sweep`): one
target for the whole search (the bundled server started once with the preset's flags, or the
`--target`), the rates to search between (without both, the target is calibrated once and the
search brackets 0.25x..2x its capacity for the profile's mix; every point reuses that
calibration), and the gate that binds at the knee. It does not parse arguments, print
(`gate.commands.sweep`) or write sweep.json (`gate.outputs.sweep_json`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.calibration.content import CALIBRATION_FILE
from gate.calibration.json_io import read_calibration
from gate.errors import ExitCode, UsageError
from gate.gates.spec import GatesFile
from gate.orchestrator.bundled_server import BundledServer, ServerOptions, start_bundled_server
from gate.orchestrator.live import LiveView
from gate.orchestrator.load_workers import WorkerCount
from gate.orchestrator.plan import ProfilePlan, resolve_plans
from gate.orchestrator.preset_flags import server_flags
from gate.orchestrator.processes import ProcessError
from gate.orchestrator.relative import mix_output_tokens
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.runner import execute
from gate.verdicts.verdict import Status

__all__ = [
    "Point",
    "Search",
    "SearchSpec",
    "SweepFault",
    "SweepOutcome",
    "SweepRequest",
    "binding_gate",
    "run_sweep",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSpec:
    profile: str
    scale: str
    overrides: dict[str, dict[str, Any]]  # profile -> key -> value, from --set
    requests_per_point: int  # each point sends this many, whatever its rate and the scale
    min_rate: float
    max_rate: float
    tolerance: float
    repeats: int
    max_points: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class Point:
    rate_rps: float
    outcome: str  # pass | fail | inconclusive | no_data
    exit_code: int
    run_dir: str
    failed: tuple[str, ...]  # gate ids that failed (or were not conclusive)
    tightest: str | None  # passing gate with the smallest relative margin

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _outcome(result: RunResult) -> Point:
    ev = result.evaluation
    code = int(result.exit_code)
    outcome = {0: "pass", 1: "fail", 3: "inconclusive"}.get(code, "no_data")
    failed: tuple[str, ...] = ()
    tightest = None
    if ev is not None:
        failed = tuple(
            v.id
            for v in ev.verdicts
            if v.blocking and v.status in (Status.FAIL, Status.INCONCLUSIVE, Status.NO_DATA)
        )
        margins = [
            (abs(v.margin / v.threshold_value), v.id)
            for v in ev.verdicts
            if v.blocking and v.status is Status.PASS and v.margin is not None and v.threshold_value
        ]
        tightest = min(margins)[1] if margins else None
    return Point(
        rate_rps=0.0,
        outcome=outcome,
        exit_code=code,
        run_dir=str(result.run_dir),
        failed=failed,
        tightest=tightest,
    )


class Search:
    """Bracket-and-bisect over the offered rate of one profile, one short run per point."""

    def __init__(self, spec: SearchSpec, base: RunConfig, sweep_dir: Path, view: LiveView) -> None:
        self.args, self.base, self.sweep_dir, self.view = spec, base, sweep_dir, view
        self.points: list[Point] = []

    def measure(self, rate: float) -> Point:
        extra = {k: dict(v) for k, v in self.args.overrides.items()}
        knobs = extra.setdefault(self.args.profile, {})
        knobs["rate_rps"] = rate
        # As many requests at every rate: a low rate is not inconclusive for lack of samples.
        knobs["duration_seconds"] = self.args.requests_per_point / rate
        plans = resolve_plans(
            [self.args.profile], self.base.gates_file, scale=self.args.scale, extra_overrides=extra
        )
        point = None
        for attempt in range(1 + max(self.args.repeats, 0)):
            config = dataclasses.replace(
                self.base,
                plans=tuple(plans),
                run_dir=self.sweep_dir / (f"rate-{rate:g}" + (f"-{attempt}" if attempt else "")),
            )
            result = execute(config, self.view)
            point = dataclasses.replace(_outcome(result), rate_rps=rate)
            self.points.append(point)
            self.view.message(
                f"batchgate sweep: {rate:g} req/s -> {point.outcome}"
                + (f" ({', '.join(point.failed)})" if point.failed else "")
            )
            if result.fault is not None:
                raise SweepFault(result.fault.message)
            if point.outcome != "inconclusive":
                break
        assert point is not None
        return point

    def search(self) -> tuple[float | None, float | None]:
        """(highest passing rate, lowest failing rate above it)."""
        a = self.args
        lo: float | None = None
        hi: float | None = None
        rate = a.min_rate
        while len(self.points) < a.max_points:
            if self.measure(rate).outcome == "pass":
                lo = rate
                if rate >= a.max_rate:
                    return lo, None
                rate = min(rate * 2.0, a.max_rate)
            else:
                hi = rate
                break
        if lo is None or hi is None:
            return lo, hi
        while hi / lo - 1.0 > a.tolerance and len(self.points) < a.max_points:
            mid = (lo + hi) / 2.0
            if self.measure(mid).outcome == "pass":
                lo = mid
            else:
                hi = mid
        return lo, hi


class SweepFault(Exception):
    """The target died or the run was interrupted mid-search; the message says which."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """What `batchgate sweep` was asked: the profile, the search's settings, the target."""

    profile: str
    scale: str
    gates_file: GatesFile
    gates_text: str
    plans: tuple[ProfilePlan, ...]  # the profile, resolved once (a bad override fails early)
    overrides: dict[str, dict[str, Any]]  # profile -> key -> value, from --set
    min_rate: float | None  # None: 0.25x the calibrated capacity
    max_rate: float | None  # None: 2x the calibrated capacity
    requests_per_point: int
    tolerance: float
    repeats: int
    max_points: int
    target_url: str | None = None
    preset_name: str | None = None
    preset: Mapping[str, Any] | None = None
    server_args: tuple[str, ...] = ()
    api_key: str | None = None
    admin_token: str | None = None
    workers: WorkerCount = 1
    calibration: str = "fresh"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepOutcome:
    spec: SearchSpec
    points: tuple[Point, ...]
    knee_rps: float | None  # the highest passing rate
    first_failing_rps: float | None  # the lowest failing rate above it
    binding_gate: str | None
    fault: str | None = None  # the target died or a run was interrupted: the search stopped


def run_sweep(request: SweepRequest, sweep_dir: Path, view: LiveView) -> SweepOutcome:
    """Start the target, bracket, search, stop what it started. Raises a BatchgateError when
    the search cannot start (the server, the calibration) or a run is refused."""
    r = request
    server: BundledServer | None = None
    try:
        if r.target_url is None:
            view.message("batchgate sweep: starting the bundled reference server")
            options = ServerOptions(
                preset_flags=tuple(server_flags(r.preset or {})), extra_args=r.server_args
            )
            try:
                server = start_bundled_server(sweep_dir, options)
            except ProcessError as exc:
                raise UsageError(
                    f"the bundled server did not start: {exc}", ExitCode.NO_DATA
                ) from exc
        base = RunConfig(
            gates_file=r.gates_file,
            gates_text=r.gates_text,
            plans=r.plans,
            scale=r.scale,
            run_dir=sweep_dir,
            target_url=r.target_url,
            # One bundled server for every point, measured by each (the sampler gets its PID).
            attached_server=server,
            # The bundled server got the preset as flags; a --target gets it live (each run).
            preset_name=r.preset_name if r.target_url else None,
            preset=r.preset if r.target_url else None,
            api_key=r.api_key,
            admin_token=r.admin_token,
            load_workers=r.workers,
            write_report=False,
            calibration=r.calibration,
        )
        min_rate, max_rate, base = _bracket(r, base, sweep_dir, view)
        spec = SearchSpec(
            profile=r.profile,
            scale=r.scale,
            overrides=r.overrides,
            requests_per_point=r.requests_per_point,
            min_rate=min_rate,
            max_rate=max_rate,
            tolerance=r.tolerance,
            repeats=r.repeats,
            max_points=r.max_points,
        )
        search = Search(spec, base, sweep_dir, view)
        try:
            lo, hi = search.search()
        except SweepFault as exc:
            return SweepOutcome(
                spec=spec, points=tuple(search.points), knee_rps=None, first_failing_rps=None,
                binding_gate=None, fault=str(exc),
            )  # fmt: skip
    finally:
        if server is not None:
            server.stop(timeout_seconds=15.0)
    return SweepOutcome(
        spec=spec,
        points=tuple(search.points),
        knee_rps=lo,
        first_failing_rps=hi,
        binding_gate=binding_gate(search.points, lo, hi),
    )


def _bracket(
    request: SweepRequest, base: RunConfig, sweep_dir: Path, view: LiveView
) -> tuple[float, float, RunConfig]:
    """The rates to search between, and the config every point runs with.

    Without both rates, the target is calibrated once (docs/calibration.md) and the search
    brackets 0.25x..2x its capacity for the profile's mix; every point then reuses that
    calibration (relative gates judge against it) instead of measuring again.
    """
    r = request
    if r.min_rate is not None and r.max_rate is not None and r.calibration == "off":
        return r.min_rate, r.max_rate, base
    calibrated = execute(
        dataclasses.replace(base, run_dir=sweep_dir / "calibration-run", calibrate_only=True),
        view,
    )
    path = sweep_dir / "calibration-run" / CALIBRATION_FILE
    if calibrated.exit_code != ExitCode.PASSED or not path.is_file():
        reason = calibrated.fault.message if calibrated.fault is not None else "no calibration"
        raise UsageError(f"could not calibrate the target: {reason}", ExitCode.NO_DATA)
    measured = read_calibration(path).capacity.get("short")
    tokens = None if measured is None else measured.output_tokens_per_second
    if tokens is None:
        raise UsageError(f"{path}: no capacity.short.output_tokens_per_second", ExitCode.NO_DATA)
    capacity = tokens / mix_output_tokens(r.plans[0].params)
    view.message(f"batchgate sweep: calibrated capacity for {r.profile}: {capacity:.3g} req/s")
    low = r.min_rate if r.min_rate is not None else 0.25 * capacity
    high = r.max_rate if r.max_rate is not None else max(2.0 * capacity, low)
    return low, high, dataclasses.replace(base, calibration=str(path))


def binding_gate(points: list[Point], lo: float | None, hi: float | None) -> str | None:
    """The gate that stops a higher rate: what failed just above the knee, else the tightest."""
    above = [p for p in points if hi is not None and p.rate_rps == hi and p.failed]
    if above:
        return above[-1].failed[0]
    at = [p for p in points if lo is not None and p.rate_rps == lo and p.outcome == "pass"]
    return at[-1].tightest if at else None
