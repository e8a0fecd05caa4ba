"""The `batchgate` command: one sub-command per verb of docs/exit-codes.md.

Owns argument parsing and the exit code; every verb lives in `gate.commands.<verb>` and exposes
`register(subparsers)` which adds its parser and sets `func(args) -> int`. `serve` and `load`
hand over to `python -m reference_server` / `python -m loadgen` in a child process, because
`gate` must never import torch or locust (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gate.errors import ExitCode
from gate.runtime.heap_policy import keep_freed_memory
from gate.runtime.huge_pages import prefer_small_pages

# Order is the order shown in --help.
COMMANDS = (
    "run",
    "serve",
    "load",
    "check",
    "report",
    "compare",
    "baseline",
    "rollback",
    "sweep",
    "sample",
    "init",
    "calibrate",
    "tune",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batchgate",
        description="Load-test and gate the batching behaviour of an LLM inference server.",
        epilog="Every command's --help ends with its exit codes; all of them: "
        "docs/exit-codes.md (0 passed, 1 a gate failed, 2 usage error, 3 inconclusive, "
        "4 invalid gates file, 5 no data or an invalid measurement).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"gate.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gate.commands.{name}":
                raise
            continue  # verb not built yet
        module.register(subparsers)
    return parser


def _command_parser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    return parser


# Verbs whose every argument belongs to another program: argparse would take `--port 8000` or
# `--help` for its own, so they are handed over before parsing.
PASS_THROUGH = ("serve", "load")


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in PASS_THROUGH:
        module = importlib.import_module(f"gate.commands.{words[0]}")
        return int(module.exec_with(words[1:]))
    prefer_small_pages()  # the gate's arrays are fresh memory read a few times (huge_pages.py)
    keep_freed_memory()  # and freed memory is reused, not faulted in again (heap_policy.py)
    parser = build_parser()
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # argparse reports a subcommand's unknown flag from the top parser, with the top usage
        # line; the command's own usage says what it does take.
        _command_parser(parser, getattr(args, "command", None)).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return int(ExitCode.USAGE)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("batchgate: interrupted", file=sys.stderr)
        return int(ExitCode.NO_DATA)
    except BrokenPipeError:
        # `batchgate ... | head`: the reader left; not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.PASSED)


if __name__ == "__main__":
    sys.exit(main())
