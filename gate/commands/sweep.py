"""`batchgate sweep`: the highest offered rate at which every gate still passes (docs/run.md).

Owns the command around the capacity search (`gate.orchestrator.sweep`): its arguments, one
target for the whole search (the bundled server started once with the preset's flags, or
`--target`), printing the knee and the gate that binds there, and writing `sweep.json`. Exit: 0
knee found, 1 not even the minimum rate passes, 2 usage, 4 invalid gates file, 5 the target died or
the run was interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gate.calibration.content import CALIBRATION_FILE
from gate.calibration.json_io import read_calibration
from gate.commands import _options as options
from gate.commands._common import (
    add_common_arguments,
    add_set_and_out_arguments,
    load_gates_and_preset,
    new_directory_in,
    output_console,
)
from gate.errors import BatchgateError, ExitCode, UsageError
from gate.orchestrator.bundled_server import BundledServer, ServerOptions, start_bundled_server
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, parse_sets, resolve_plans
from gate.orchestrator.preset_flags import server_flags
from gate.orchestrator.processes import ProcessError
from gate.orchestrator.relative import mix_output_tokens
from gate.orchestrator.run_config import RunConfig
from gate.orchestrator.runner import execute, new_run_id
from gate.orchestrator.sweep import Point, Search, SearchSpec, SweepFault

__all__ = ["register", "run"]

SWEEP_FILE = "sweep.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "sweep",
        help="find the highest offered rate at which every gate passes",
        description="Capacity search: run one profile at increasing offered rates (double "
        "until a gate fails, then bisect) and report the knee and the gate that binds there.",
    )
    add_common_arguments(parser)
    options.add(parser, "profile", detail="the one to sweep (default steady)")
    parser.add_argument(
        "--min-rate",
        type=float,
        default=None,
        help="first rate, req/s (default: 0.25x the calibrated capacity for the profile's mix)",
    )
    parser.add_argument(
        "--max-rate",
        type=float,
        default=None,
        help="highest rate tried, req/s (default: 2x the calibrated capacity)",
    )
    parser.add_argument(
        "--requests-per-point",
        type=int,
        default=300,
        help="requests each point sends, whatever its rate (default 300: enough for a p99 "
        "gate to pass with no exceedance)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.1,
        help="stop bisecting when hi/lo - 1 is below this (default 0.1)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="extra tries of a point whose verdict is inconclusive (default 1)",
    )
    parser.add_argument("--max-points", type=int, default=12, help="most rates tried")
    options.add(parser, "scale", detail="here each point's")
    add_set_and_out_arguments(parser)
    parser.set_defaults(func=run)


def _validate(args: argparse.Namespace) -> None:
    rates = [r for r in (args.min_rate, args.max_rate) if r is not None]
    if any(r <= 0 for r in rates) or (len(rates) == 2 and args.min_rate > args.max_rate):
        raise UsageError("need 0 < --min-rate <= --max-rate")
    if args.requests_per_point < 1:
        raise UsageError("--requests-per-point must be >= 1")
    if args.tolerance <= 0 or args.max_points < 1 or args.repeats < 0:
        raise UsageError("--tolerance must be > 0, --max-points >= 1, --repeats >= 0")


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        _validate(args)
        gates_file, preset = load_gates_and_preset(args)
        args.set = options.profile_sets(args.set, [args.profile], known=gates_file.profiles)
        # Fail early on a bad profile or override, before any server starts.
        first_plans = resolve_plans(
            [args.profile], gates_file, scale=args.scale, extra_overrides=parse_sets(args.set)
        )
        sweep_dir = new_directory_in(args.out, None, f"sweep-{new_run_id()}")
    except UsageError as exc:
        err.print(f"batchgate sweep: {exc}", markup=False)
        return int(exc.code)
    except PlanError as exc:
        err.print(f"batchgate sweep: {exc}", markup=False)
        return int(ExitCode.USAGE)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    view = LiveView()
    server: BundledServer | None = None
    try:
        url = args.target
        if url is None:
            view.message("batchgate sweep: starting the bundled reference server")
            try:
                server = start_bundled_server(
                    sweep_dir,
                    ServerOptions(
                        preset_flags=tuple(server_flags(preset or {})),
                        extra_args=tuple(args.server_arg),
                    ),
                )
            except ProcessError as exc:
                err.print(f"batchgate sweep: the bundled server did not start: {exc}", markup=False)
                return int(ExitCode.NO_DATA)
        base = RunConfig(
            gates_file=gates_file,
            gates_text=args.gates.read_text(encoding="utf-8"),
            plans=tuple(first_plans),
            scale=args.scale,
            run_dir=sweep_dir,
            target_url=args.target,
            # One bundled server for every point, measured by each (the sampler gets its PID).
            attached_server=server,
            # The bundled server got the preset as flags; a --target gets it live (each run).
            preset_name=args.preset if args.target else None,
            preset=preset if args.target else None,
            api_key=args.api_key,
            admin_token=args.admin_token,
            load_workers=args.workers,
            write_report=False,
            calibration=args.calibration,
        )
        try:
            min_rate, max_rate, base = _bracket(args, base, first_plans[0].params, sweep_dir, view)
        except BatchgateError as exc:
            err.print(f"batchgate sweep: {exc}", markup=False)
            return int(exc.exit_code)
        spec = SearchSpec(
            profile=args.profile,
            scale=args.scale,
            overrides=parse_sets(args.set),
            requests_per_point=args.requests_per_point,
            min_rate=min_rate,
            max_rate=max_rate,
            tolerance=args.tolerance,
            repeats=args.repeats,
            max_points=args.max_points,
        )
        search = Search(spec, base, sweep_dir, view)
        try:
            lo, hi = search.search()
        except BatchgateError as exc:
            err.print(f"batchgate sweep: {exc}", markup=False)
            return int(exc.exit_code)
        except SweepFault as exc:
            err.print(f"batchgate sweep: {exc}", markup=False)
            _write(sweep_dir, args, search.points, None, None, ended=str(exc), spec=spec)
            return int(ExitCode.NO_DATA)
    finally:
        if server is not None:
            server.stop(timeout_seconds=15.0)
    binding = _binding(search.points, lo, hi)
    _write(sweep_dir, args, search.points, lo, hi, binding=binding, spec=spec)
    _print(search.points, lo, hi, binding, spec, sweep_dir)
    return int(ExitCode.PASSED if lo is not None else ExitCode.FAILED)


def _bracket(
    args: argparse.Namespace,
    base: RunConfig,
    params: dict[str, Any],
    sweep_dir: Path,
    view: LiveView,
) -> tuple[float, float, RunConfig]:
    """The rates to search between, and the config every point runs with.

    Without both rates, the target is calibrated once (docs/calibration.md) and the search
    brackets 0.25x..2x its capacity for the profile's mix; every point then reuses that
    calibration (relative gates judge against it) instead of measuring again.
    """
    if args.min_rate is not None and args.max_rate is not None and args.calibration == "off":
        return args.min_rate, args.max_rate, base
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
    capacity = tokens / mix_output_tokens(params)
    view.message(f"batchgate sweep: calibrated capacity for {args.profile}: {capacity:.3g} req/s")
    low = args.min_rate if args.min_rate is not None else 0.25 * capacity
    high = args.max_rate if args.max_rate is not None else max(2.0 * capacity, low)
    return low, high, dataclasses.replace(base, calibration=str(path))


def _binding(points: list[Point], lo: float | None, hi: float | None) -> str | None:
    """The gate that stops a higher rate: what failed just above the knee, else the tightest."""
    above = [p for p in points if hi is not None and p.rate_rps == hi and p.failed]
    if above:
        return above[-1].failed[0]
    at = [p for p in points if lo is not None and p.rate_rps == lo and p.outcome == "pass"]
    return at[-1].tightest if at else None


def _write(
    sweep_dir: Path,
    args: argparse.Namespace,
    points: list[Point],
    lo: float | None,
    hi: float | None,
    *,
    binding: str | None = None,
    ended: str = "completed",
    spec: SearchSpec | None = None,
) -> None:
    data = {
        "schema_version": 1,
        "profile": args.profile,
        "scale": args.scale,
        "target": args.target,
        "preset": args.preset,
        "gates_file": str(args.gates),
        "min_rate_rps": spec.min_rate if spec else args.min_rate,
        "max_rate_rps": spec.max_rate if spec else args.max_rate,
        "requests_per_point": args.requests_per_point,
        "tolerance": args.tolerance,
        "knee_rps": lo,
        "first_failing_rps": hi,
        "binding_gate": binding,
        "ended": ended,
        "points": [p.to_dict() for p in points],
    }
    (sweep_dir / SWEEP_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _print(
    points: list[Point],
    lo: float | None,
    hi: float | None,
    binding: str | None,
    spec: SearchSpec,
    sweep_dir: Path,
) -> None:
    out = output_console()
    table = Table(title=f"batchgate sweep — {spec.profile}")
    for header in ("rate req/s", "verdict", "exit", "failing / inconclusive gates"):
        table.add_column(header)
    for p in points:
        table.add_row(f"{p.rate_rps:.4g}", p.outcome, str(p.exit_code), ", ".join(p.failed) or "—")
    out.print(table)
    if lo is None:
        first = next((p for p in points if p.rate_rps == spec.min_rate), None)
        what = {"fail": "fails", "inconclusive": "is inconclusive (too few samples to decide)"}
        verdict = what.get(first.outcome, "gave no data") if first else "was not measured"
        out.print(
            f"no passing rate: the lowest rate tried, {spec.min_rate:.3g} req/s, {verdict}"
            + (f" ({binding})" if binding else ""),
            markup=False,
        )
    elif hi is None:
        out.print(
            f"knee >= {lo:.3g} req/s: every gate passed up to the highest rate tried"
            + (f"; tightest gate there: {binding}" if binding else ""),
            markup=False,
        )
    else:
        out.print(
            f"knee: {lo:.3g} req/s passes, {hi:.3g} req/s does not; binding gate: "
            f"{binding or 'unknown'}",
            markup=False,
        )
    out.print(f"sweep: {sweep_dir / SWEEP_FILE}", markup=False)
