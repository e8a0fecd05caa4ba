"""`batchgate report RUN_DIR [--gates FILE] [--saved] [--out FILE]`: terminal report + report.html.

Gets the verdicts either by re-evaluating the saved run (with `--gates`, else the run's own
gates.yaml, the file the manifest names, or ./gates.yaml, as `check` picks them; verdicts.json,
junit.xml and summary.md are rewritten so they agree with the page) or, with `--saved` or when
no gates file is found, from the run's verdicts.json; prints the terminal report, (re)writes
report.html and exits like `check` (docs/exit-codes.md). Bad input is a message and an exit
code, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console

from gate.commands import _options as options
from gate.commands._common import (
    add_evaluation_arguments,
    find_gates_file,
    load_baseline,
    load_gates,
    open_run,
    output_console,
    read_saved_verdicts,
    rollback_target,
    stale_verdicts_note,
)
from gate.errors import ExitCode, UsageError
from gate.outputs import terminal
from gate.outputs.files import write_outputs
from gate.outputs.html.report import ReportError, write_report
from gate.rundir.run import RunData
from gate.verdicts.evaluate import evaluate
from gate.verdicts.verdict import Evaluation

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "report",
        help="print the terminal report and (re)write report.html for a saved run",
        description="Re-evaluate a saved run (or read its verdicts.json), print the terminal "
        "report and write a self-contained report.html with plots.",
    )
    options.add(parser, "run_dir")
    options.add(parser, "gates", detail=options.RUN_GATES_DEFAULT)
    parser.add_argument(
        "--saved", action="store_true", help="use the run's verdicts.json, do not re-evaluate"
    )
    add_evaluation_arguments(parser)
    options.add(parser, "out_file", detail="the HTML report (default RUN_DIR/report.html)")
    parser.set_defaults(func=run)


def _saved(run_dir: Path, run_data: RunData) -> Evaluation:
    evaluation = read_saved_verdicts(run_dir / "verdicts.json")
    if evaluation is None:
        raise UsageError(
            f"{run_dir}: no gates file to evaluate with and no verdicts.json (pass --gates FILE)",
            ExitCode.USAGE,
        )
    stale = stale_verdicts_note(run_data)
    if stale is None:
        return evaluation
    # Stored verdicts of records that are gone never pass: no data, unless they failed (1 > 5).
    code = evaluation.exit_code
    code = code if code is ExitCode.FAILED else ExitCode.NO_DATA
    return dataclasses.replace(evaluation, exit_code=code, notes=(*evaluation.notes, stale))


def _evaluation(args: argparse.Namespace, run_dir: Path, run_data: RunData) -> Evaluation:
    if args.saved and args.gates:
        raise UsageError("--saved and --gates exclude each other", ExitCode.USAGE)
    gates_path = (
        None if args.saved else find_gates_file(args.gates, run_data.manifest, run_data.path)
    )
    if gates_path is None:
        return _saved(run_dir, run_data)
    gates_file = load_gates(gates_path)
    baseline = load_baseline(args.baseline, args.baseline_dir)
    evaluation = evaluate(
        run_data, gates_file, baseline=baseline, inconclusive_policy=args.inconclusive
    )
    try:
        write_outputs(run_dir, evaluation)
    except OSError as exc:
        raise UsageError(f"cannot write outputs into {run_dir}: {exc}", ExitCode.USAGE) from None
    return evaluation


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    run_dir = Path(args.run_dir)
    try:
        run_data = open_run(run_dir)
        evaluation = _evaluation(args, run_dir, run_data)
        target = rollback_target(args.rollback_target, run_data.manifest)
        if target:
            evaluation = dataclasses.replace(evaluation, rollback_target=target)
        try:
            page = write_report(
                run_dir, evaluation, out=Path(args.out) if args.out else None, run=run_data
            )
        except ReportError as exc:
            raise UsageError(str(exc), ExitCode.USAGE) from None
    except UsageError as stop:
        err.print(f"batchgate report: {stop}", markup=False, soft_wrap=True)
        return int(stop.code)
    output_console().print(terminal.render(evaluation))
    output_console().print(f"report: {page}", markup=False, soft_wrap=True)
    return int(evaluation.exit_code)
