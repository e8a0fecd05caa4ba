"""`batchgate init`: write a commented copy of the packaged default gates file to start from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gate.commands import _options as options
from gate.errors import ExitCode
from gate.gates.file import packaged_gates_path

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "init",
        help="write the default gates.yaml (commented) to start from",
        description="Write the packaged default gates file, with the reasoning for each gate, "
        "to PATH (default ./gates.yaml); `batchgate run` then uses it from this directory.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=Path("gates.yaml"),
        metavar="PATH",
        help="the file to write (default ./gates.yaml)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path: Path = args.path
    if path.exists() and not args.force:
        print(f"batchgate init: {path} exists (use --force to overwrite)", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        path.write_text(packaged_gates_path().read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        print(f"batchgate init: cannot write {path}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    print(f"wrote {path}: the default gates, each with its reasoning (docs/gates.md)")
    return int(ExitCode.PASSED)
