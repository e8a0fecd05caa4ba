"""`batchgate calibrate`: measure a target's unloaded service time and capacity alone.

Runs the first phase of `batchgate run` (docs/calibration.md) against the bundled server (with
`--preset`'s start flags) or `--target`, writes `<out>/<id>/calibration.json` (and, with
`--calibration auto`, the store entry later runs reuse) and prints what it measured. Exit 0, or
5 when the target could not be calibrated; 2 for bad flags.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gate.calibration.content import CALIBRATION_FILE, Calibration
from gate.calibration.json_io import read_calibration
from gate.commands import _options as options
from gate.commands._common import (
    add_common_arguments,
    load_gates_and_preset,
    new_directory_in,
    output_console,
)
from gate.errors import BatchgateError, ExitCode, UsageError
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import ProfilePlan
from gate.orchestrator.run_config import RunConfig
from gate.orchestrator.runner import execute, new_run_id
from gate.units import UnitKind, format_value

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "calibrate",
        help="measure the target's unloaded service time and saturation capacity",
        description="Calibrate a target (the first phase of `batchgate run`): lone requests "
        "for the unloaded TTFT/E2E/TPOT/ITL, then a saturated closed loop for the capacity.",
    )
    add_common_arguments(parser)
    options.add(parser, "out")
    options.add(parser, "run_id")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.calibration == "off":
        err.print("batchgate calibrate: --calibration off leaves nothing to do", markup=False)
        return int(ExitCode.USAGE)
    try:
        gates_file, preset = load_gates_and_preset(args)
        run_dir = new_directory_in(args.out, args.run_id, new_run_id())
    except UsageError as exc:
        err.print(f"batchgate calibrate: {exc}", markup=False)
        return int(exc.code)
    run_dir = run_dir.with_name(f"calibrate-{run_dir.name}")
    config = RunConfig(
        gates_file=gates_file,
        gates_text=args.gates.read_text(encoding="utf-8"),
        # No profile is run; the plan only names the run's profile set for the manifest.
        plans=(ProfilePlan(name="calibration", overrides={}),),
        scale="smoke",
        run_dir=run_dir,
        target_url=args.target,
        preset_name=args.preset,
        preset=preset,
        server_args=tuple(args.server_arg),
        api_key=args.api_key,
        admin_token=args.admin_token,
        load_workers=args.workers,
        calibration=args.calibration,
        calibrate_only=True,
        write_report=False,
    )
    try:
        result = execute(config, LiveView())
    except BatchgateError as exc:
        err.print(f"batchgate calibrate: {exc}", markup=False)
        return int(exc.exit_code)
    path = run_dir / CALIBRATION_FILE
    if result.exit_code != ExitCode.PASSED or not path.is_file():
        reason = result.fault.message if result.fault is not None else "no calibration"
        err.print(f"batchgate calibrate: {reason}", markup=False)
        return int(ExitCode.NO_DATA)
    try:
        calibration = read_calibration(path)
    except BatchgateError as exc:
        err.print(f"batchgate calibrate: {exc}", markup=False)
        return int(exc.exit_code)
    _print(calibration, path)
    return int(ExitCode.PASSED)


def _seconds(value: float | None) -> str:
    return "—" if value is None else format_value(float(value), UnitKind.DURATION)


def _print(calibration: Calibration, path: Path) -> None:
    out = output_console()
    table = Table(title="unloaded (lone short requests)")
    for header in ("metric", "p50", "p90", "n"):
        table.add_column(header)
    for metric, entry in calibration.unloaded.get("short", {}).items():
        table.add_row(metric, _seconds(entry.p50), _seconds(entry.p90), str(entry.n))
    out.print(table)
    cap = calibration.capacity.get("short")
    if cap is not None:
        out.print(
            f"capacity ({cap.users} closed-loop users): {cap.rps or 0:.1f} req/s "
            f"[{cap.rps_low or 0:.1f}, {cap.rps_high or 0:.1f}], "
            f"{cap.output_tokens_per_second or 0:.0f} output tokens/s",
            markup=False,
        )
    kv = calibration.kv_capacity
    tokens = None if kv is None else kv.tokens
    out.print(
        f"KV capacity: {'unknown' if tokens is None else f'{tokens} tokens'} "
        f"(source {None if kv is None else kv.source}); took {calibration.took_seconds} s",
        markup=False,
    )
    out.print(f"calibration: {path}", markup=False)
