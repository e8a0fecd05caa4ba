"""Whether numpy asks the kernel for transparent huge pages for the gate's arrays.

numpy madvises every array of 4 MiB or more for huge pages (on kernels that have them). A check
reads a run into a few hundred MiB of fresh arrays and scans each a few times, so huge pages
save it little TLB work; but on a virtual machine whose host backs guest memory lazily, first
touching a huge page cost up to a few milliseconds here, and a check's system time ranged
0.6-1.5 s with them against 0.5-0.6 s without, on the same run (benchmarks/bench_gate.py shows
user and system time per row). The `batchgate` command turns the madvise off for its own
process at start; `NUMPY_MADVISE_HUGEPAGE` in the environment (numpy's own switch) overrides it.
Owns only that choice.
"""

from __future__ import annotations

import os

__all__ = ["prefer_small_pages"]


def prefer_small_pages() -> bool:
    """Stop numpy's huge-page madvise in this process unless the environment chose; True when
    it was turned off here."""
    if os.environ.get("NUMPY_MADVISE_HUGEPAGE"):
        return False  # numpy read the user's choice at import
    try:
        from numpy._core.multiarray import _set_madvise_hugepage  # numpy >= 2
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage  # numpy 1.x
        except ImportError:
            return False  # a numpy without the switch: nothing to turn off
    _set_madvise_hugepage(False)
    return True
