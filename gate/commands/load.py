"""`batchgate load`: runs the load generator (`python -m loadgen`)."""

from __future__ import annotations

import argparse
import os
import sys

from gate.commands import _options as options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "load",
        help="run a load profile against a target and write its records",
        description="Start the load generator. All flags go to "
        "`python -m loadgen`; see `batchgate load --help-load`.",
        add_help=False,
    )
    parser.add_argument("load_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return exec_with(list(args.load_args))


def exec_with(argv: list[str]) -> int:
    """Replace this process with `python -m loadgen ARGV` (every flag, --help included, is
    theirs). exec: signals (SIGTERM drain, Ctrl-C) reach it directly."""
    argv = ["--help" if a == "--help-load" else a for a in argv]
    # Its --help and errors then say `batchgate load`, the command the user typed.
    environ = {**os.environ, options.PROG_ENV: "batchgate load"}
    os.execve(sys.executable, [sys.executable, "-m", "loadgen", *argv], environ)
    return 0  # not reached
