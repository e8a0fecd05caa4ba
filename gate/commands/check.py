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

from gate.commands import _options as options
from gate.commands._common import (
    add_evaluation_arguments,
    find_gates_file,
    load_baseline,
    load_gates,
    open_run,
    output_console,
    rollback_target,
)
from gate.errors import ExitCode, UsageError
from gate.outputs import summary, terminal
from gate.outputs.files import write_outputs
from gate.verdicts.evaluate import evaluate

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "check",
        help="re-evaluate the gates on a saved run directory",
        description="Judge a saved run directory against a gates file; writes verdicts.json, "
        "junit.xml and summary.md into it.",
    )
    options.add(parser, "run_dir", detail="or one profile's directory")
    options.add(parser, "gates", detail=options.RUN_GATES_DEFAULT)
    add_evaluation_arguments(parser)
    parser.add_argument(
        "--no-write", action="store_true", help="do not write verdicts.json, junit.xml, summary.md"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        # An explicit gates file is read before the run: a broken one is exit 4 whatever the
        # run directory holds.
        gates_file = load_gates(args.gates) if args.gates else None
        run_data = open_run(args.run_dir)
        if gates_file is None:
            path = find_gates_file(args.gates, run_data.manifest, run_data.path)
            if path is None:
                raise UsageError("no gates file (pass --gates FILE)", ExitCode.USAGE)
            gates_file = load_gates(path)
        baseline = load_baseline(args.baseline, args.baseline_dir)
    except UsageError as stop:
        print(f"batchgate check: {stop}", file=sys.stderr)
        return int(stop.code)
    evaluation = evaluate(
        run_data, gates_file, baseline=baseline, inconclusive_policy=args.inconclusive
    )
    target = rollback_target(args.rollback_target, run_data.manifest)
    if target:
        evaluation = replace(evaluation, rollback_target=target)
    if not args.no_write:
        try:
            write_outputs(args.run_dir if Path(args.run_dir).is_dir() else ".", evaluation)
        except OSError as exc:
            print(f"batchgate check: cannot write outputs: {exc}", file=sys.stderr)
    output_console().print(terminal.render(evaluation))
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in summary.annotations(evaluation):
            print(line, file=sys.stdout)
    return int(evaluation.exit_code)
