"""What the commands that judge saved runs (`check`, `report`, `compare`) share.

Owns `UsageError` (a message plus the exit code of docs/exit-codes.md, which each command prints its
own way), the options that shape a re-evaluation, finding the gates file for a saved run, and
turning the library's errors (invalid gates file, unknown baseline, unreadable verdicts.json)
into a `UsageError`. It does not read run directories (the commands differ on a missing one)
or evaluate anything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from gate.baseline import Baseline, BaselineError, BaselineStore
from gate.commands import _options as options
from gate.errors import ExitCode, UsageError
from gate.gates.file import load, packaged_gates_path
from gate.gates.reader import GatesFileError
from gate.gates.spec import GatesFile
from gate.json_shapes import problem
from gate.orchestrator.load_workers import AUTO, WorkerCount, parse_workers
from gate.orchestrator.preset_flags import start_only
from gate.orchestrator.suite import SUITE_FILE
from gate.outputs.files import read_verdicts
from gate.rundir.consistency import run_mismatches
from gate.rundir.run import RunData, RunDirError, load_run
from gate.rundir.shapes import VERDICT_KEYS, VERDICTS
from gate.verdicts.verdict import Evaluation

__all__ = [
    "DEFAULT_GATES_FILE",
    "add_common_arguments",
    "add_evaluation_arguments",
    "add_set_and_out_arguments",
    "console_width",
    "default_gates_path",
    "find_gates_file",
    "load_baseline",
    "load_gates",
    "load_gates_and_preset",
    "new_directory_in",
    "open_run",
    "output_console",
    "read_saved_verdicts",
    "rollback_target",
    "stale_verdicts_note",
]

DEFAULT_GATES_FILE = Path("gates.yaml")


def add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --baseline, --baseline-dir, --inconclusive and --rollback-target (gate/commands/
    _options.py: the same words on every verb)."""
    for key in ("baseline", "baseline_dir", "inconclusive", "rollback_target"):
        options.add(parser, key)


def find_gates_file(
    explicit: str | None, manifest: Mapping[str, Any] | None, run_dir: str | Path
) -> Path | None:
    """The gates file to judge a saved run with: `explicit` (--gates), else the copy a
    `batchgate run` keeps beside its manifest (`run_dir/gates.yaml`), else the file the manifest
    names; ./gates.yaml (or the packaged default) only for a run without a manifest.

    The copy comes first because the manifest's path is absolute: after the run directory is
    moved it names nothing, and in a copied run it names the original's file. A run whose
    manifest names a gates file that is gone, with no copy beside it, is refused (exit 2):
    judging it with whatever gates.yaml happens to be in the working directory could pass a
    run its own gates fail."""
    if explicit:
        return Path(explicit)
    copy = Path(run_dir) / SUITE_FILE
    if manifest is not None and copy.is_file():
        # Whatever the manifest says (a damaged one may have lost `gates_file`): the run's own.
        return copy
    recorded = (manifest or {}).get("gates_file")
    if not recorded:
        return default_gates_path()
    if Path(recorded).is_file():
        return Path(recorded)
    raise UsageError(
        f"{Path(run_dir) / 'manifest.json'}: the run's gates file {recorded} is gone and "
        f"{copy} does not exist; pass --gates FILE",
        ExitCode.USAGE,
    )


# A run id is one directory name: no separator, and no leading "." (so neither "." nor "..",
# which would put the run outside --out).
_RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def new_directory_in(out: Path, name: str | None, default: str) -> Path:
    """`out/name` (`out/default` without a name) for a command's new run directory; a usage
    error (2) when `out` exists but is not a directory or `name` is not a plain name."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: not a directory (--out)", ExitCode.USAGE)
    if name is not None and not _RUN_ID.match(name):
        raise UsageError(
            f"--run-id {name!r}: use letters, digits, '_', '.' and '-' (a directory name)",
            ExitCode.USAGE,
        )
    return out / (name or default)


def load_gates(path: str | Path) -> GatesFile:
    """The gates file at `path`; a missing one is a usage error (2) as in `batchgate run`, an
    invalid one exit 4."""
    if not Path(path).is_file():
        raise UsageError(f"{path}: no such gates file", ExitCode.USAGE)
    try:
        return load(path)
    except GatesFileError as exc:  # its message names the file, line and key
        raise UsageError(str(exc), ExitCode.INVALID_GATES) from None


def load_baseline(name: str | None, store_dir: str | None) -> Baseline | None:
    """The named baseline from the store, or None when no name was given."""
    if not name:
        return None
    try:
        return BaselineStore(store_dir).load(name)
    except BaselineError as exc:
        raise UsageError(str(exc), ExitCode.USAGE) from None


def rollback_target(explicit: str | None, manifest: Mapping[str, Any] | None) -> str | None:
    """The URL rollback commands should name: --rollback-target, else the run's target."""
    return explicit or ((manifest or {}).get("target") or {}).get("url")


def read_saved_verdicts(path: Path) -> Evaluation | None:
    """The evaluation saved in a verdicts.json; None when the file is not there. A file that
    is not JSON, or has a field of the wrong type or a verdict without a key it needs, is
    no data (5), named `file: field: what is wrong`."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable verdicts: {exc}", ExitCode.NO_DATA) from None
    wrong = problem(data, VERDICTS) if isinstance(data, dict) else "expected a JSON object"
    if wrong is None:
        for index, verdict in enumerate(data.get("verdicts") or ()):
            missing = [key for key in VERDICT_KEYS if key not in verdict]
            if missing:
                wrong = f"verdicts[{index}]: no {missing[0]!r}"
                break
    if wrong is not None:
        raise UsageError(f"{path}: unreadable verdicts: {wrong}", ExitCode.NO_DATA)
    try:
        return read_verdicts(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable verdicts: {exc}", ExitCode.NO_DATA) from None


def stale_verdicts_note(run: RunData) -> str | None:
    """What a command showing a run's stored verdicts.json must say when the run no longer
    matches them: records lost or changed after the verdicts were judged, or a file damaged
    so that `check` could not judge the run (`gate.rundir.consistency.run_mismatches`)."""
    mismatches = run_mismatches(run)
    if not mismatches:
        return None
    return (
        f"{Path(run.path) / 'verdicts.json'} was judged on a run that no longer matches it "
        f"({'; '.join(mismatches)}): its verdicts are stale; `batchgate check` judges the run "
        "as it is"
    )


def open_run(path_text: str | Path) -> RunData:
    """The run directory a command judges or renders; one rule for every command.

    A path that does not exist or is not a directory is a usage error (2): the user typed it.
    A directory that is not a readable run (no profiles, a corrupt record) is no data (5).
    """
    path = Path(path_text)
    if not path.exists():
        raise UsageError(f"{path}: no such run directory", ExitCode.USAGE)
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory", ExitCode.USAGE)
    try:
        return load_run(path)
    except RunDirError as exc:
        raise UsageError(f"not a readable run: {exc}", ExitCode.NO_DATA) from None


def _workers(text: str) -> WorkerCount:
    """argparse's type for --workers: its error is argparse's usage error (exit 2)."""
    try:
        return parse_workers(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags the verbs that start a target and measure it share (run, sweep, tune, calibrate);
    the shared ones come from gate/commands/_options.py."""
    options.add(parser, "gates", detail=options.LOCAL_GATES_DEFAULT)
    parser.add_argument(
        "--calibration",
        default="fresh",
        metavar="fresh|auto|off|FILE",
        help="the run's first phase, calibrating the target (docs/calibration.md): fresh "
        "(measure now, the default), auto (reuse a saved calibration of the same target, "
        "settings and hardware from .batchgate/calibrations, else measure and save), off, or a "
        "calibration.json to reuse",
    )
    parser.add_argument(
        "--keep-preset",
        action="store_true",
        help="with --target and --preset: leave the target on the preset after the run (by "
        "default its previous settings, recorded in the manifest, are restored)",
    )
    options.add(parser, "target", detail="gate it instead of starting the bundled server")
    options.add(parser, "preset")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra flag for the bundled server (repeat; e.g. --server-arg=--max-num-seqs=32)",
    )
    parser.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N|auto",
        help="Locust worker processes of the load generator (default 1); auto: as many as the "
        "calibration's capacity sweep needed, doubled whenever one process saturated, up to "
        "one per CPU (docs/loadgen.md)",
    )
    options.add(parser, "api_key")
    options.add(parser, "admin_token")


def add_set_and_out_arguments(parser: argparse.ArgumentParser) -> None:
    """--set [PROFILE.]KEY=VALUE and --out DIR, as `sweep` and `tune` take them."""
    options.add(parser, "set")
    options.add(parser, "out")


def load_gates_and_preset(
    args: argparse.Namespace,
) -> tuple[GatesFile, dict[str, Any] | None]:
    """(gates file, preset or None); raises UsageError with exit 4 or 2.

    Sets `args.gates` to the file actually read (./gates.yaml, else the packaged default).
    """
    args.gates = default_gates_path() if args.gates is None else args.gates
    if not args.gates.is_file():
        raise UsageError(f"{args.gates}: no such gates file", ExitCode.USAGE)
    try:
        gates_file = load(args.gates)
    except GatesFileError as exc:
        raise UsageError(str(exc), ExitCode.INVALID_GATES) from None
    preset = None
    if args.preset is not None:
        if args.preset not in gates_file.presets:
            known = ", ".join(gates_file.presets) or "none defined"
            raise UsageError(f"unknown preset {args.preset!r} in {args.gates} (presets: {known})")
        preset = gates_file.presets[args.preset]
    if args.target is not None and preset is not None and start_only(preset):
        raise UsageError(
            f"preset {args.preset!r} sets {', '.join(start_only(preset))}, which a running "
            "server cannot change; restart the target with it, or run without --target"
        )
    if args.target is not None and args.server_arg:
        raise UsageError(
            "--server-arg configures the bundled server; it has no effect with --target"
        )
    if args.workers == AUTO and args.calibration == "off":
        raise UsageError(
            "--workers auto sizes the load generator in the calibration's capacity sweep, "
            "which --calibration off skips: give a number of workers"
        )
    if args.target is not None and not args.target.startswith(("http://", "https://")):
        raise UsageError(f"--target must be an http(s) URL, got {args.target!r}")
    return gates_file, preset


def default_gates_path() -> Path:
    """./gates.yaml when the working directory has one, else the gates file shipped inside
    the package (so every command works from any directory)."""
    local = DEFAULT_GATES_FILE
    if local.is_file():
        return local
    return packaged_gates_path()


def output_console() -> Console:
    """The console a command prints its results on: `COLUMNS` columns when it is set (in a
    terminal and through a pipe alike), else the terminal's width, else 160 columns in a CI log
    (no terminal), where rich would otherwise assume 80 and squeeze the tables."""
    return Console(highlight=False, width=console_width(os.environ, sys.stdout.isatty()))


def console_width(environ: Mapping[str, str], is_terminal: bool) -> int | None:
    """The width `output_console` uses (None: ask the terminal)."""
    columns = environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if is_terminal else 160
