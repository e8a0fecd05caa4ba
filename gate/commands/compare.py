"""`batchgate compare RUN_A RUN_B [--gates FILE] [--json]`: two runs side by side.

Reads both run directories, takes each run's verdicts from its verdicts.json (or evaluates
both with `--gates FILE`, writing nothing), and prints the comparison of `gate.compare` as rich
tables or, with `--json`, as one JSON object. Exit 0 when compared; 2 for a missing path or bad
arguments, 4 for an invalid gates file, 5 for a directory that is not a readable run, two
runs without a profile in common, or a damaged run (compared, with notes saying what is wrong).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rich.console import Console

from gate.commands import _options as options
from gate.commands._common import (
    load_gates,
    open_run,
    output_console,
    read_saved_verdicts,
    stale_verdicts_note,
)
from gate.compare import compare, render
from gate.errors import ExitCode, UsageError
from gate.rundir.consistency import run_mismatches
from gate.verdicts.evaluate import evaluate

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "compare",
        help="compare two saved runs: key metrics, verdicts, deltas and their noise",
        description="Side-by-side key metrics per profile and verdicts of two run directories; "
        "a difference is marked when the runs' intervals do not overlap.",
    )
    parser.add_argument("run_a", metavar="RUN_A", help="the reference run directory")
    parser.add_argument("run_b", metavar="RUN_B", help="the run compared against it")
    options.add(
        parser,
        "gates",
        detail="evaluate both runs with it, writing nothing (default: each run's stored "
        "verdicts.json)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="two-sided interval level (default 0.95)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    try:
        if not 0.5 <= args.confidence < 1.0:
            raise UsageError("--confidence must lie in [0.5, 1)", ExitCode.USAGE)
        gates_file = load_gates(args.gates) if args.gates else None
        run_a, run_b = open_run(args.run_a), open_run(args.run_b)
        if gates_file is not None:
            verdicts_a, verdicts_b = evaluate(run_a, gates_file), evaluate(run_b, gates_file)
        else:
            verdicts_a = read_saved_verdicts(Path(run_a.path) / "verdicts.json")
            verdicts_b = read_saved_verdicts(Path(run_b.path) / "verdicts.json")
        comparison = compare(
            run_a, run_b, verdicts_a=verdicts_a, verdicts_b=verdicts_b, confidence=args.confidence
        )
        if gates_file is None:  # the stored verdicts: say when a run's records changed since
            stale = [
                f"run {label}: {note}"
                for label, run in (("A", run_a), ("B", run_b))
                if (note := stale_verdicts_note(run)) is not None
            ]
            comparison = dataclasses.replace(comparison, notes=(*comparison.notes, *stale))
        if not comparison.profiles:
            raise UsageError(
                f"no profile in common (A: {', '.join(run_a.profiles) or 'none'}; "
                f"B: {', '.join(run_b.profiles) or 'none'})",
                ExitCode.NO_DATA,
            )
    except UsageError as stop:
        err.print(f"batchgate compare: {stop}", markup=False, soft_wrap=True)
        return int(stop.code)
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=2, allow_nan=False))
    else:
        output_console().print(render(comparison))
    # Compared, but a damaged run (its records or files no longer what was measured, said in
    # the notes) is no data, as `check` would judge it.
    damaged = any(run_mismatches(run) for run in (run_a, run_b))
    return int(ExitCode.NO_DATA if damaged else ExitCode.PASSED)
