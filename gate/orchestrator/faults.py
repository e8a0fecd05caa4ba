"""How a run ends early: the faults, their reasons, and turning SIGTERM into an exception.

Owns the `RunFault` values a run can end with (the target died, the load process crashed, the
user or CI interrupted it, the run directory could not be written: a full disk, a quota, a
read-only mount), the exit code they give (5: the measurement did not complete, so
nothing may pass; docs/exit-codes.md), and a context manager that makes SIGTERM behave like Ctrl-C
in the main thread, so one `finally` path stops every child. It does not stop anything itself.
"""

from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from gate.errors import ExitCode

__all__ = [
    "FAULT_EXIT_CODE",
    "RunFault",
    "Terminated",
    "terminate_as_exception",
    "write_failure",
]

# Interrupted, dead target, crashed load: all are "no data / invalid measurement". We use 5
# rather than the shell's 130 for Ctrl-C too, so a CI step that greps exit codes sees the same
# "the gate could not judge" code whatever cut the run short; a pass (0) is impossible either way.
FAULT_EXIT_CODE = ExitCode.NO_DATA


class Terminated(BaseException):
    """SIGTERM arrived (CI cancelled the job); handled like KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


@dataclass(frozen=True, kw_only=True)
class RunFault:
    """Why a run ended before it completed; `ended` is the manifest's value."""

    ended: str  # interrupted | target_died | load_crashed | write_failed
    reason: str
    profile: str | None = None

    def __post_init__(self) -> None:
        if self.ended not in ("interrupted", "target_died", "load_crashed", "write_failed"):
            raise ValueError(f"not a fault: {self.ended!r}")

    @property
    def message(self) -> str:
        where = f" during profile {self.profile!r}" if self.profile else ""
        return f"run {self.ended.replace('_', ' ')}{where}: {self.reason}"


# What a full or broken run directory raises; any other OSError is a bug and stays one.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.ENOMEM}
)


def write_failure(exc: BaseException, *, profile: str | None = None) -> RunFault | None:
    """The fault for a run directory that cannot be written, or None for any other error."""
    if not isinstance(exc, OSError) or exc.errno not in _WRITE_ERRNOS:
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    return RunFault(
        ended="write_failed",
        profile=profile,
        reason=f"the run directory cannot be written: {exc.strerror or exc}{where}; the records "
        "written before it are kept",
    )


@contextmanager
def terminate_as_exception() -> Iterator[None]:
    """While active (main thread only), SIGTERM raises `Terminated` where the code runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
