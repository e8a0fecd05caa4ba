"""`batchgate serve`: runs the bundled reference server (`python -m reference_server`)."""

from __future__ import annotations

import argparse
import os
import sys

from gate.commands import _options as options


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
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
    # Its --help and errors then say `batchgate serve`, the command the user typed.
    environ = {**os.environ, options.PROG_ENV: "batchgate serve"}
    os.execve(sys.executable, [sys.executable, "-m", "reference_server", *argv], environ)
    return 0  # not reached
