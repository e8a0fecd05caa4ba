"""`batchgate sweep`: the highest offered rate at which every gate still passes (docs/run.md).

Owns the command around the capacity search (`gate.orchestrator.sweep.run_sweep`: the target,
the bracket, the search): its arguments and their validation before anything starts, printing
the points, the knee and the gate that binds there, and the exit code; sweep.json is written by
`gate.outputs.sweep_json`. Exit: 0 knee found, 1 not even the minimum rate passes, 2 usage, 4
invalid gates file, 5 the target died or the run was interrupted.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gate.commands import _options as options
from gate.commands._common import (
    add_common_arguments,
    add_set_and_out_arguments,
    load_gates_and_preset,
    new_directory_in,
    output_console,
)
from gate.errors import BatchgateError, ExitCode, UsageError
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, parse_sets, resolve_plans
from gate.orchestrator.runner import new_run_id
from gate.orchestrator.sweep import Point, SearchSpec, SweepOutcome, SweepRequest, run_sweep
from gate.outputs.sweep_json import SWEEP_FILE, write_sweep_json

__all__ = ["register", "run"]


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
    request = SweepRequest(
        profile=args.profile,
        scale=args.scale,
        gates_file=gates_file,
        gates_text=args.gates.read_text(encoding="utf-8"),
        plans=tuple(first_plans),
        overrides=parse_sets(args.set),
        min_rate=args.min_rate,
        max_rate=args.max_rate,
        requests_per_point=args.requests_per_point,
        tolerance=args.tolerance,
        repeats=args.repeats,
        max_points=args.max_points,
        target_url=args.target,
        preset_name=args.preset,
        preset=preset,
        server_args=tuple(args.server_arg),
        api_key=args.api_key,
        admin_token=args.admin_token,
        workers=args.workers,
        calibration=args.calibration,
    )
    try:
        outcome = run_sweep(request, sweep_dir, LiveView())
    except BatchgateError as exc:
        err.print(f"batchgate sweep: {exc}", markup=False)
        return int(exc.exit_code)
    _write(sweep_dir, args, outcome)
    if outcome.fault is not None:
        err.print(f"batchgate sweep: {outcome.fault}", markup=False)
        return int(ExitCode.NO_DATA)
    lo, hi = outcome.knee_rps, outcome.first_failing_rps
    _print(list(outcome.points), lo, hi, outcome.binding_gate, outcome.spec, sweep_dir)
    return int(ExitCode.PASSED if lo is not None else ExitCode.FAILED)


def _write(sweep_dir: Path, args: argparse.Namespace, outcome: SweepOutcome) -> None:
    write_sweep_json(
        sweep_dir / SWEEP_FILE,
        profile=args.profile,
        scale=args.scale,
        target=args.target,
        preset=args.preset,
        gates_file=str(args.gates),
        min_rate_rps=outcome.spec.min_rate,
        max_rate_rps=outcome.spec.max_rate,
        requests_per_point=args.requests_per_point,
        tolerance=args.tolerance,
        knee_rps=outcome.knee_rps,
        first_failing_rps=outcome.first_failing_rps,
        binding_gate=outcome.binding_gate,
        ended=outcome.fault or "completed",
        points=[p.to_dict() for p in outcome.points],
    )


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
