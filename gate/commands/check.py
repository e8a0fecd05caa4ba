"""`batchgate check RUN_DIR [--gates FILE] [--baseline NAME] [--inconclusive pass|fail]`.

Re-evaluates a saved run: loads the gates file (exit 4 when invalid), the run directory and
the baseline, evaluates, writes verdicts.json / junit.xml / summary.md into the run directory,
prints the terminal report (and GitHub annotations under Actions) and returns the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from gate.baseline import BaselineError, BaselineStore
from gate.evaluate import evaluate
from gate.exit_codes import ExitCode
from gate.gates_file import GatesFileError, load
from gate.outputs import summary, terminal
from gate.rundir import RunDirError, load_run
from gate.verdicts import write_outputs

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="re-evaluate the gates on a saved run directory",
        description="Judge a saved run directory against a gates file; exit codes as DESIGN.md §7.",
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="run directory (or one profile's directory)"
    )
    parser.add_argument(
        "--gates", metavar="FILE", help="gates file (default: the run's, else ./gates.yaml)"
    )
    parser.add_argument("--baseline", metavar="NAME", help="baseline for regression gates")
    parser.add_argument(
        "--baseline-dir", metavar="DIR", help="baseline store (default .batchgate/baselines)"
    )
    parser.add_argument(
        "--inconclusive", choices=("pass", "fail"), help="override the gates file's policy"
    )
    parser.add_argument(
        "--rollback-target", metavar="URL", help="target URL shown in rollback commands"
    )
    parser.add_argument(
        "--no-write", action="store_true", help="do not write verdicts.json, junit.xml, summary.md"
    )
    parser.set_defaults(func=run)


def _gates_path(args: argparse.Namespace, manifest: dict | None) -> Path | None:
    if args.gates:
        return Path(args.gates)
    recorded = (manifest or {}).get("gates_file")
    if recorded and Path(recorded).exists():
        return Path(recorded)
    default = Path("gates.yaml")
    return default if default.exists() else None


def run(args: argparse.Namespace) -> int:
    if args.gates:
        try:
            gates_file = load(args.gates)
        except GatesFileError as exc:
            print(f"batchgate check: {exc}", file=sys.stderr)
            return int(ExitCode.INVALID_GATES)
    try:
        run_data = load_run(args.run_dir)
    except RunDirError as exc:
        print(f"batchgate check: {exc}", file=sys.stderr)
        return int(ExitCode.NO_DATA)
    if not args.gates:
        path = _gates_path(args, run_data.manifest)
        if path is None:
            print("batchgate check: no gates file (pass --gates FILE)", file=sys.stderr)
            return int(ExitCode.USAGE)
        try:
            gates_file = load(path)
        except GatesFileError as exc:
            print(f"batchgate check: {exc}", file=sys.stderr)
            return int(ExitCode.INVALID_GATES)
    baseline = None
    if args.baseline:
        try:
            baseline = BaselineStore(args.baseline_dir).load(args.baseline)
        except BaselineError as exc:
            print(f"batchgate check: {exc}", file=sys.stderr)
            return int(ExitCode.USAGE)
    evaluation = evaluate(
        run_data, gates_file, baseline=baseline, inconclusive_policy=args.inconclusive
    )
    target = args.rollback_target or ((run_data.manifest or {}).get("target") or {}).get("url")
    if target:
        evaluation = replace(evaluation, rollback_target=target)
    if not args.no_write:
        try:
            write_outputs(args.run_dir if Path(args.run_dir).is_dir() else ".", evaluation)
        except OSError as exc:
            print(f"batchgate check: cannot write outputs: {exc}", file=sys.stderr)
    Console(highlight=False).print(terminal.render(evaluation))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in summary.annotations(evaluation):
            print(line, file=sys.stdout)
    return int(evaluation.exit_code)
