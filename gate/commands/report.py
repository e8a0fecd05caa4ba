"""`batchgate report RUN_DIR [--gates FILE] [--saved] [--out FILE]`: terminal report + report.html.

Gets the verdicts either by re-evaluating the saved run (with `--gates`, else the gates file
the manifest names, else ./gates.yaml; verdicts.json, junit.xml and summary.md are rewritten so
they agree with the page) or, with `--saved` or when no gates file is found, from the run's
verdicts.json; prints the terminal report, (re)writes report.html and exits like `check`
(DESIGN.md §7). Bad input is a message and an exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console

from gate.baseline import BaselineError, BaselineStore
from gate.evaluate import evaluate
from gate.exit_codes import ExitCode
from gate.gates_file import GatesFileError, load
from gate.outputs import terminal
from gate.report_html import ReportError, write_report
from gate.rundir import RunData, RunDirError, load_run
from gate.verdicts import Evaluation, read_verdicts, write_outputs

__all__ = ["register", "run"]


class _Stop(Exception):
    """Ends the command with a message and an exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="print the terminal report and (re)write report.html for a saved run",
        description="Re-evaluate a saved run (or read its verdicts.json), print the terminal "
        "report and write a self-contained report.html with plots; exit codes as `check`.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory")
    parser.add_argument(
        "--gates", metavar="FILE", help="gates file (default: the run's, else ./gates.yaml)"
    )
    parser.add_argument(
        "--saved", action="store_true", help="use the run's verdicts.json, do not re-evaluate"
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
        "--out", metavar="FILE", help="where to write the page (default RUN_DIR/report.html)"
    )
    parser.set_defaults(func=run)


def _gates_path(args: argparse.Namespace, run_data: RunData) -> Path | None:
    if args.gates:
        return Path(args.gates)
    recorded = (run_data.manifest or {}).get("gates_file")
    if recorded and Path(recorded).exists():
        return Path(recorded)
    default = Path("gates.yaml")
    return default if default.exists() else None


def _saved(run_dir: Path) -> Evaluation:
    path = run_dir / "verdicts.json"
    if not path.exists():
        raise _Stop(
            f"{run_dir}: no gates file to evaluate with and no verdicts.json (pass --gates FILE)",
            ExitCode.USAGE,
        )
    try:
        return read_verdicts(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _Stop(f"{path}: unreadable verdicts: {exc}", ExitCode.NO_DATA) from None


def _evaluation(args: argparse.Namespace, run_dir: Path, run_data: RunData) -> Evaluation:
    if args.saved and args.gates:
        raise _Stop("--saved and --gates exclude each other", ExitCode.USAGE)
    gates_path = None if args.saved else _gates_path(args, run_data)
    if gates_path is None:
        return _saved(run_dir)
    try:
        gates_file = load(gates_path)
    except GatesFileError as exc:
        raise _Stop(str(exc), ExitCode.INVALID_GATES) from None
    baseline = None
    if args.baseline:
        try:
            baseline = BaselineStore(args.baseline_dir).load(args.baseline)
        except BaselineError as exc:
            raise _Stop(str(exc), ExitCode.USAGE) from None
    evaluation = evaluate(
        run_data, gates_file, baseline=baseline, inconclusive_policy=args.inconclusive
    )
    try:
        write_outputs(run_dir, evaluation)
    except OSError as exc:
        raise _Stop(f"cannot write outputs into {run_dir}: {exc}", ExitCode.USAGE) from None
    return evaluation


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False)
    run_dir = Path(args.run_dir)
    try:
        if not run_dir.is_dir():
            raise _Stop(f"{run_dir}: not a directory", ExitCode.USAGE)
        try:
            run_data = load_run(run_dir)
        except RunDirError as exc:
            raise _Stop(str(exc), ExitCode.NO_DATA) from None
        evaluation = _evaluation(args, run_dir, run_data)
        target = args.rollback_target or ((run_data.manifest or {}).get("target") or {}).get("url")
        if target:
            evaluation = dataclasses.replace(evaluation, rollback_target=target)
        try:
            page = write_report(
                run_dir, evaluation, out=Path(args.out) if args.out else None, run=run_data
            )
        except ReportError as exc:
            raise _Stop(str(exc), ExitCode.USAGE) from None
    except _Stop as stop:
        err.print(f"batchgate report: {stop}", markup=False, soft_wrap=True)
        return int(stop.code)
    Console(highlight=False).print(terminal.render(evaluation))
    Console(highlight=False).print(f"report: {page}", markup=False, soft_wrap=True)
    return int(evaluation.exit_code)
