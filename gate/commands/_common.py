"""What the commands that judge saved runs (`check`, `report`, `compare`) share.

Owns `CommandStop` (a message plus the exit code of DESIGN.md §7, which each command prints its
own way), the options that shape a re-evaluation, finding the gates file for a saved run, and
turning the library's errors (invalid gates file, unknown baseline, unreadable verdicts.json)
into a `CommandStop`. It does not read run directories (the commands differ on a missing one)
or evaluate anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.baseline import Baseline, BaselineError, BaselineStore
from gate.exit_codes import ExitCode
from gate.gates_file import GatesFile, GatesFileError, load
from gate.verdicts import Evaluation, read_verdicts

__all__ = [
    "DEFAULT_GATES_FILE",
    "CommandStop",
    "add_evaluation_arguments",
    "find_gates_file",
    "load_baseline",
    "load_gates",
    "read_saved_verdicts",
    "rollback_target",
]

DEFAULT_GATES_FILE = Path("gates.yaml")


class CommandStop(Exception):
    """Ends a command early with a message and an exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --baseline, --baseline-dir, --inconclusive and --rollback-target."""
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


def find_gates_file(explicit: str | None, manifest: Mapping[str, Any] | None) -> Path | None:
    """The gates file to judge a saved run with: `explicit` (--gates), else the one the run's
    manifest names while it still exists, else ./gates.yaml when present; None when none is."""
    if explicit:
        return Path(explicit)
    recorded = (manifest or {}).get("gates_file")
    if recorded and Path(recorded).exists():
        return Path(recorded)
    return DEFAULT_GATES_FILE if DEFAULT_GATES_FILE.exists() else None


def load_gates(path: str | Path) -> GatesFile:
    try:
        return load(path)
    except GatesFileError as exc:  # its message names the file, line and key
        raise CommandStop(str(exc), ExitCode.INVALID_GATES) from None


def load_baseline(name: str | None, store_dir: str | None) -> Baseline | None:
    """The named baseline from the store, or None when no name was given."""
    if not name:
        return None
    try:
        return BaselineStore(store_dir).load(name)
    except BaselineError as exc:
        raise CommandStop(str(exc), ExitCode.USAGE) from None


def rollback_target(explicit: str | None, manifest: Mapping[str, Any] | None) -> str | None:
    """The URL rollback commands should name: --rollback-target, else the run's target."""
    return explicit or ((manifest or {}).get("target") or {}).get("url")


def read_saved_verdicts(path: Path) -> Evaluation | None:
    """The evaluation saved in a verdicts.json; None when the file is not there."""
    if not path.exists():
        return None
    try:
        return read_verdicts(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandStop(f"{path}: unreadable verdicts: {exc}", ExitCode.NO_DATA) from None
