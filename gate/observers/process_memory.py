"""The server's process tree and its resident memory, the sampler's view without a GPU.

Owns finding the server process and its descendants (vLLM and SGLang run their engines in
child processes), their current resident set size and, on Linux, their resident high-water
mark (`VmHWM` in /proc/<pid>/status), which the kernel keeps between our samples. It does not
know about NVML or files.
"""

from __future__ import annotations

import sys
import time

import psutil

__all__ = ["ProcessGone", "ProcessTree"]

# Re-listing descendants walks all of /proc and the liveness check builds a psutil.Process;
# at 50 Hz either would be most of the sampler's cost, and neither changes that fast.
CHILDREN_REFRESH_SECONDS = 5.0
ALIVE_CHECK_SECONDS = 1.0


class ProcessGone(Exception):
    """The server process no longer exists (or cannot be read)."""


class ProcessTree:
    """The process `pid` plus its descendants, re-listed every few seconds."""

    def __init__(self, pid: int, *, include_children: bool = True) -> None:
        try:
            self.root = psutil.Process(pid)
            self.root.memory_info()
        except psutil.NoSuchProcess as exc:
            raise ProcessGone(f"no process with PID {pid}") from exc
        except psutil.AccessDenied as exc:
            raise ProcessGone(f"no permission to read process {pid}") from exc
        self.pid = pid
        self.include_children = include_children
        self._members: list[psutil.Process] = [self.root]
        self._listed_at = -float("inf")
        self._alive_checked_at = time.monotonic()
        self._alive = True

    def pids(self) -> set[int]:
        return {p.pid for p in self._current()}

    def alive(self) -> bool:
        """Whether the root process still runs (checked at most once a second)."""
        now = time.monotonic()
        if self._alive and now - self._alive_checked_at >= ALIVE_CHECK_SECONDS:
            self._alive_checked_at = now
            try:
                self._alive = self.root.is_running() and self.root.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                self._alive = False
        return self._alive

    def memory_bytes(self) -> tuple[int, int | None]:
        """(resident bytes, resident high-water bytes or None) summed over the tree.

        On Linux both come from one read of /proc/<pid>/status per process; the high-water
        mark (VmHWM) is exact for one process and an upper bound for several (their peaks
        need not coincide). Raises ProcessGone when the root process is gone."""
        if not sys.platform.startswith("linux"):
            return self.rss_bytes(), None
        rss_total, hwm_total = 0, 0
        for proc in self._current():
            status = _read_status_bytes(proc.pid)
            if status is None:
                if proc is self.root:
                    raise ProcessGone(f"process {self.pid} exited")
                continue
            rss, hwm = status
            rss_total += rss
            hwm_total += hwm
        return rss_total, hwm_total

    def rss_bytes(self) -> int:
        """Sum of resident memory over the tree (psutil; any OS); raises ProcessGone when the
        root is gone."""
        total = 0
        for proc in self._current():
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess) as exc:
                if proc is self.root:
                    raise ProcessGone(f"process {self.pid} exited") from exc
            except psutil.AccessDenied as exc:
                if proc is self.root:
                    raise ProcessGone(f"no permission to read process {self.pid}") from exc
        return total

    def _current(self) -> list[psutil.Process]:
        now = time.monotonic()
        if self.include_children and now - self._listed_at >= CHILDREN_REFRESH_SECONDS:
            self._listed_at = now
            try:
                self._members = [self.root, *self.root.children(recursive=True)]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._members = [self.root]
        return self._members


def _read_status_bytes(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in bytes from /proc/<pid>/status; None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read()
        hwm_at = text.find(b"VmHWM:")
        rss_at = text.find(b"VmRSS:")
        if hwm_at < 0 or rss_at < 0:
            return None  # zombies and kernel threads have no memory lines
        hwm = int(text[hwm_at + 6 : text.index(b"kB", hwm_at)])
        rss = int(text[rss_at + 6 : text.index(b"kB", rss_at)])
    except (OSError, ValueError):
        return None
    return rss * 1024, hwm * 1024  # the kernel reports kB
