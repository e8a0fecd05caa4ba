"""Whether glibc's malloc keeps the memory a check frees for the check's next arrays.

A check reads a run into a few hundred MiB of arrays, drops most of them as it goes, and makes
more: gaps, masks, sorted copies. By default glibc hands every block of 128 KiB or more to the
kernel on its own mapping, and returns it on free (its threshold rises with the blocks freed,
and the heap's top is trimmed past twice that), so the next array of that size is fresh memory
again, and each first touch of a page is a fault. On a virtual machine whose host backs memory
lazily those faults were a third of a 1M-record check's time. With blocks up to 32 MiB (glibc's
most) taken from the heap, and the heap never trimmed, a check of 1M records took 1/3 fewer
page faults (180,000 against 118,000) and about a tenth less time (benchmarks/bench_gate.py).
The cost: the process keeps its peak heap until it exits, which suits a command that reads,
judges and ends.

The `batchgate` command sets this for its own process at start, not for the servers or load
generators it starts. glibc's own settings in the environment (`MALLOC_MMAP_THRESHOLD_`,
`MALLOC_TRIM_THRESHOLD_`, or `glibc.malloc` tunables in `GLIBC_TUNABLES`) win; another C library
is left as it is. Owns only that choice.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_memory"]

# mallopt(3) parameters and glibc's upper bound of the mapping threshold on 64-bit systems.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
_NEVER_TRIM = 2**31 - 1  # bytes free at the heap's top before it is trimmed: the most an int takes
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Keep freed blocks of up to 32 MiB in the heap for reuse; True when it was set here."""
    if any(os.environ.get(name) for name in _USER_SETTINGS):
        return False
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    # Asked of the C library itself: platform.libc_ver() would scan the Python binary, tens of
    # MiB for a statically linked one, at every start.
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):  # no confstr, or a C library without the name
        return False
    if not libc.startswith("glibc"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # Both: setting either turns glibc's rising threshold off, and alone either made more
    # faults than the default (the mapping threshold alone 240,000, the trim alone 350,000).
    return bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)) and bool(
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    )
