"""CPU time the hypervisor took from this virtual machine during a measurement ("steal").

On a VM the host may run something else on a vCPU while a benchmark's process is runnable on
it: that time passes on the wall clock but no process here gets it. On this machine's 2 vCPUs
it was 0-26 % of the machine's CPU time over single 3-second bench_server HTTP runs, and the
runs with the most steal had the lowest HTTP/offline ratios. Benchmarks print it beside their
figures so that a reader can tell part of the host's time from the code's (not all of it: a
vCPU also computes more slowly while its neighbour is busy, and that is not steal).
Linux's /proc/stat counts it in USER_HZ ticks (10 ms); without that file or its aggregate line
there is no figure (None). A container shows the host's or an emulated /proc/stat (lxcfs puts
0 there), so a 0 is only as good as the kernel's view.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CpuTicks", "read", "share"]

# The aggregate "cpu" line's first 8 fields: user nice system idle iowait irq softirq steal
# (guest time, the 9th and 10th, is counted in user already).
_FIELDS = 8
_STEAL = 7

CpuTicks = tuple[int, int]  # (steal ticks, all ticks) summed over the machine's CPUs


def read(path: str | Path = "/proc/stat") -> CpuTicks | None:
    """The machine's steal and total ticks so far, or None where the file has no such line."""
    try:
        with open(path, "rb") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if len(fields) < _FIELDS + 1 or fields[0] != b"cpu":
        return None
    try:
        ticks = [int(x) for x in fields[1 : _FIELDS + 1]]
    except ValueError:
        return None
    return ticks[_STEAL], sum(ticks)


def share(before: CpuTicks | None, after: CpuTicks | None) -> float | None:
    """The fraction of all CPU time between two readings that the host took (0.0-1.0); None
    without both readings or when no tick passed between them."""
    if before is None or after is None:
        return None
    total = after[1] - before[1]
    if total <= 0:
        return None
    return (after[0] - before[0]) / total
