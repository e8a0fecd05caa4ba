"""`batchgate run`: the whole launch gate in one command (docs/run.md).

Owns the command line (flags map onto `gate.orchestrator.runner.RunConfig`), the checks that
happen before anything starts (gates file: exit 4; preset, profiles, overrides, baseline:
exit 2), printing the terminal report, the fault message and the rollback hint, and the exit
code (DESIGN.md §7; 5 for a run cut short). The run itself is `gate.orchestrator.runner`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from gate.baseline import BaselineError, BaselineStore
from gate.exit_codes import ExitCode
from gate.gates_file import GatesFile, GatesFileError, load
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, choose_profiles, parse_sets, resolve_plans
from gate.orchestrator.presets import start_only
from gate.orchestrator.runner import RunConfig, RunResult, RunSetupError, execute, new_run_id
from gate.outputs import summary, terminal
from gate.verdicts import Status

__all__ = ["register", "run"]

SCALES = ("smoke", "quick", "full")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="start the target (or use --target), run every profile, judge the gates",
        description="Run the launch gate: the bundled reference server (or --target URL), each "
        "traffic profile with the observers, then the gates of the gates file. Writes "
        "OUT/<run-id>/ (manifest.json, one directory per profile, verdicts.json, junit.xml, "
        "summary.md, report.html). Exit: 0 pass, 1 a gate failed, 2 usage, 3 inconclusive, "
        "4 invalid gates file, 5 no data / invalid measurement / run cut short.",
    )
    add_common_arguments(parser)
    parser.add_argument(
        "--profiles",
        metavar="A,B,...",
        help="profiles to run (default: the gates file's profiles: section)",
    )
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default="quick",
        help="duration scale: smoke (CI, < 2 min), quick (< 10 min), full (default quick)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs"),
        help="parent directory of run directories (default runs/)",
    )
    parser.add_argument("--run-id", help="name of the run directory (default: time + random)")
    parser.add_argument("--baseline", metavar="NAME", help="baseline for regression gates")
    parser.add_argument(
        "--baseline-dir", metavar="DIR", help="baseline store (default .batchgate/baselines)"
    )
    parser.add_argument(
        "--inconclusive",
        choices=("pass", "fail"),
        help="override the gates file's inconclusive policy",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PROFILE.KEY=VALUE",
        help="override one profile parameter (on top of the gates file)",
    )
    parser.set_defaults(func=run)


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags `run` and `sweep` share."""
    parser.add_argument(
        "--gates", type=Path, default=Path("gates.yaml"), help="gates file (default gates.yaml)"
    )
    parser.add_argument(
        "--target",
        metavar="URL",
        help="gate a running OpenAI-compatible server instead of the bundled one",
    )
    parser.add_argument(
        "--preset",
        metavar="NAME",
        help="batching preset from the gates file (server flags for the bundled "
        "server; PUT /admin/batching for a --target that has it)",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra flag for the bundled server (repeat; e.g. --server-arg=--max-num-seqs=32)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="Locust worker processes of the load generator (default 1; see docs/loadgen.md)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("BATCHGATE_API_KEY"),
        help="API key for the target (default $BATCHGATE_API_KEY)",
    )
    parser.add_argument(
        "--admin-token",
        default=os.environ.get("BATCHGATE_ADMIN_TOKEN"),
        help="admin token for /admin/* (default $BATCHGATE_ADMIN_TOKEN)",
    )


class UsageProblem(Exception):
    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


def load_gates_and_preset(
    args: argparse.Namespace,
) -> tuple[GatesFile, dict[str, Any] | None]:
    """(gates file, preset or None); raises UsageProblem with exit 4 or 2."""
    try:
        gates_file = load(args.gates)
    except GatesFileError as exc:
        raise UsageProblem(str(exc), ExitCode.INVALID_GATES) from None
    preset = None
    if args.preset is not None:
        if args.preset not in gates_file.presets:
            known = ", ".join(gates_file.presets) or "none defined"
            raise UsageProblem(f"unknown preset {args.preset!r} in {args.gates} (presets: {known})")
        preset = gates_file.presets[args.preset]
    if args.target is not None and preset is not None and start_only(preset):
        raise UsageProblem(
            f"preset {args.preset!r} sets {', '.join(start_only(preset))}, which a running "
            "server cannot change; restart the target with it, or run without --target"
        )
    if args.target is not None and args.server_arg:
        raise UsageProblem(
            "--server-arg configures the bundled server; it has no effect with --target"
        )
    if args.workers < 1:
        raise UsageProblem(f"--workers must be >= 1, got {args.workers}")
    if args.target is not None and not args.target.startswith(("http://", "https://")):
        raise UsageProblem(f"--target must be an http(s) URL, got {args.target!r}")
    return gates_file, preset


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        gates_file, preset = load_gates_and_preset(args)
        names = choose_profiles(gates_file, args.profiles)
        plans = resolve_plans(
            names, gates_file, scale=args.scale, extra_overrides=parse_sets(args.set)
        )
        baseline = None
        if args.baseline:
            baseline = BaselineStore(args.baseline_dir).load(args.baseline)
    except UsageProblem as exc:
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
        run_dir=args.out / (args.run_id or new_run_id()),
        target_url=args.target,
        preset_name=args.preset,
        preset=preset,
        server_args=tuple(args.server_arg),
        baseline=baseline,
        inconclusive_policy=args.inconclusive,
        api_key=args.api_key,
        admin_token=args.admin_token,
        load_workers=args.workers,
    )
    view = LiveView()
    view.message(
        f"batchgate: run {config.run_dir} — profiles {', '.join(p.name for p in plans)}, "
        f"scale {args.scale}" + (f", preset {args.preset}" if args.preset else "")
    )
    try:
        result = execute(config, view)
    except RunSetupError as exc:
        err.print(f"batchgate run: {exc}", markup=False)
        return int(exc.code)
    except GatesFileError as exc:
        err.print(f"batchgate run: {exc}", markup=False)
        return int(ExitCode.INVALID_GATES)
    report(result, args, err)
    return int(result.exit_code)


def report(result: RunResult, args: argparse.Namespace, err: Console) -> None:
    # In CI logs (no terminal) rich would wrap the verdict table at 80 columns.
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
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
