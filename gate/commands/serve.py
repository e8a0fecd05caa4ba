"""`batchgate serve`: runs the bundled reference server (`python -m reference_server`)."""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="start the bundled OpenAI-compatible reference server",
        description="Start the bundled reference server. All flags go to "
        "`python -m reference_server`; see `batchgate serve --help-server`.",
        add_help=False,
    )
    parser.add_argument("server_args", nargs=argparse.REMAINDER)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return exec_with(list(args.server_args))


def exec_with(argv: list[str]) -> int:
    """Replace this process with `python -m reference_server ARGV` (every flag, --help included, is
    theirs). exec: signals (SIGTERM drain, Ctrl-C) reach it directly."""
    argv = ["--help" if a == "--help-server" else a for a in argv]
    os.execv(sys.executable, [sys.executable, "-m", "reference_server", *argv])
    return 0  # not reached
