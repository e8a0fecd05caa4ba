"""Exit codes of every `batchgate` command that judges (DESIGN.md §7)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    PASSED = 0  # all gates passed (warnings allowed)
    FAILED = 1  # a gate failed
    USAGE = 2  # bad command line
    INCONCLUSIVE = 3  # only where policy makes inconclusive non-passing
    INVALID_GATES = 4  # invalid gates file or unknown metric
    NO_DATA = 5  # no data, or the measurement itself was invalid
