"""The exit codes of every `batchgate` command that judges, and the one exception tree.

Every error the gate raises on purpose derives from `BatchgateError` and carries the exit code a
command ends with when it is not caught earlier (docs/exit-codes.md): a bad command line is 2, a
bad gates file 4, a run directory or target that yields no data 5. Commands print the message and
exit with `error.exit_code`; none of them maps exception types to codes on its own. It does not
know where the errors are raised.
"""

from __future__ import annotations

import enum

__all__ = ["BatchgateError", "ExitCode", "UsageError"]


class ExitCode(enum.IntEnum):
    PASSED = 0  # all gates passed (warnings allowed)
    FAILED = 1  # a gate failed
    USAGE = 2  # bad command line
    INCONCLUSIVE = 3  # only where policy makes inconclusive non-passing
    INVALID_GATES = 4  # invalid gates file or unknown metric
    NO_DATA = 5  # no data, or the measurement itself was invalid


class BatchgateError(Exception):
    """Base of the gate's errors: a message for people plus the exit code it ends a command with.

    Subclasses set `default_exit_code`; one raise site may pass another (a target that is not
    usable is "no data", one that was never reachable from a typo'd URL is still "no data").
    """

    default_exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str = "", exit_code: ExitCode | int | None = None) -> None:
        super().__init__(message)
        self.exit_code = ExitCode(self.default_exit_code if exit_code is None else exit_code)

    @property
    def code(self) -> ExitCode:  # the name the orchestrator's callers used
        return self.exit_code

    def __str__(self) -> str:
        # Exception.__str__, not a subclass base's (KeyError would quote the message).
        return str(self.args[0]) if self.args else ""


class UsageError(BatchgateError):
    """A command cannot do what it was asked (bad flag, missing file); exit 2 unless told."""
