"""`batchgate run`: the whole launch gate in one command (docs/run.md).

Owns the command line (flags map onto `gate.orchestrator.runner.RunConfig`), the checks that
happen before anything starts (gates file: exit 4; preset, profiles, overrides, baseline:
exit 2), printing the terminal report, the fault message and the rollback hint, and the exit
code (docs/exit-codes.md; 5 for a run cut short). The run itself is `gate.orchestrator.runner`.
"""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from gate.baseline import BaselineError, BaselineStore
from gate.commands import _options as options
from gate.commands._common import (
    add_common_arguments,
    load_gates_and_preset,
    new_directory_in,
    output_console,
)
from gate.errors import BatchgateError, ExitCode, UsageError
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, choose_profiles, parse_sets, resolve_plans
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.runner import execute, new_run_id
from gate.outputs import summary, terminal
from gate.verdicts.verdict import Status

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "run",
        help="start the target (or use --target), run every profile, judge the gates",
        description="Run the launch gate: the bundled reference server (or --target URL), each "
        "traffic profile with the observers, then the gates of the gates file. Writes "
        "OUT/<run-id>/ (manifest.json, one directory per profile, verdicts.json, junit.xml, "
        "summary.md, report.html).",
    )
    add_common_arguments(parser)
    options.add(
        parser,
        "profile",
        action="append",
        detail="repeat, or comma-separate, to run several (default: the gates file's "
        "profiles: section)",
    )
    options.add(parser, "scale")
    options.add(parser, "out")
    options.add(parser, "run_id")
    for key in ("baseline", "baseline_dir", "inconclusive"):
        options.add(parser, key)
    options.add(parser, "set")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        gates_file, preset = load_gates_and_preset(args)
        names = choose_profiles(gates_file, ",".join(args.profile) if args.profile else None)
        sets = parse_sets(options.profile_sets(args.set, names, known=gates_file.profiles))
        plans = resolve_plans(names, gates_file, scale=args.scale, extra_overrides=sets)
        baseline = None
        if args.baseline:
            baseline = BaselineStore(args.baseline_dir).load(args.baseline)
        run_dir = new_directory_in(args.out, args.run_id, new_run_id())
    except UsageError as exc:
        err.print(f"batchgate run: {exc}", markup=False)
        return int(exc.code)
    except (PlanError, BaselineError) as exc:
        err.print(f"batchgate run: {exc}", markup=False)
        return int(ExitCode.USAGE)
    config = RunConfig(
        gates_file=gates_file,
        gates_text=args.gates.read_text(encoding="utf-8"),
        plans=tuple(plans),
        scale=args.scale,
        run_dir=run_dir,
        target_url=args.target,
        preset_name=args.preset,
        preset=preset,
        server_args=tuple(args.server_arg),
        baseline=baseline,
        inconclusive_policy=args.inconclusive,
        api_key=args.api_key,
        admin_token=args.admin_token,
        load_workers=args.workers,
        calibration=args.calibration,
        keep_preset=args.keep_preset,
    )
    view = LiveView()
    view.message(
        f"batchgate: run {config.run_dir} — profiles {', '.join(p.name for p in plans)}, "
        f"scale {args.scale}" + (f", preset {args.preset}" if args.preset else "")
    )
    try:
        result = execute(config, view)
    except BatchgateError as exc:  # could not start measuring: its message and exit code
        err.print(f"batchgate run: {exc}", markup=False)
        return int(exc.exit_code)
    report(result, args, err)
    return int(result.exit_code)


def report(result: RunResult, args: argparse.Namespace, err: Console) -> None:
    # In CI logs (no terminal) rich would wrap the verdict table at 80 columns.
    out = output_console()
    if result.evaluation is not None:
        out.print(terminal.render(result.evaluation))
        failed = [
            v
            for v in result.evaluation.verdicts
            if v.status is Status.FAIL and not v.monitor and v.rollback
        ]
        if failed and args.target is None:
            presets = sorted({v.rollback for v in failed if v.rollback})
            out.print(
                "the bundled server was stopped with the run; to check the rollback preset "
                "re-run with: "
                + " or ".join(f"batchgate run --gates {args.gates} --preset {p}" for p in presets),
                markup=False,
            )
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in summary.annotations(result.evaluation):
                print(line, file=sys.stdout)
    for note in result.notes:
        err.print(f"batchgate run: note: {note}", markup=False)
    if result.fault is not None:
        err.print(f"batchgate run: {result.fault.message}", markup=False)
        err.print(
            "batchgate run: no gate can pass a run that did not complete; artifacts "
            f"kept in {result.run_dir}",
            markup=False,
        )
    out.print(f"run directory: {result.run_dir}", markup=False)
