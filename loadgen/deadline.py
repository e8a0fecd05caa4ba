"""Sleeping until a planned instant, inside gevent, with sub-millisecond precision.

Owns the wait of the open-loop scheduler for a request's planned time. It does not plan times
nor send anything.

Why not `gevent.sleep`: libev (and libuv) hand the poll a timeout in whole milliseconds,
rounded up, so a sleep of 0.3 ms wakes ~1 ms later. On this project's machines that made the
median send-time error ~0.7 ms and the p99 ~2 ms before any request had been built — the same
order as the error a trace replay must stay under. A Linux timerfd armed at the absolute
CLOCK_MONOTONIC instant (the clock behind `time.monotonic`) becomes readable at that instant,
and the hub wakes on the fd, not on its coarse timeout: the wait costs no CPU and wakes within
tens of microseconds. Where timerfd is not available (not Linux, or a seccomp filter refuses
it) the wait falls back to `gevent.sleep`, with its coarser wake-up.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import time

import gevent
import gevent.socket

__all__ = ["DeadlineTimer"]

_CLOCK_MONOTONIC = 1
_TFD_CLOEXEC = 0o2000000
_TFD_NONBLOCK = 0o4000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _open_timerfd() -> tuple[int, object] | None:
    """(fd, the libc handle) or None where timerfd cannot be had."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
    except (OSError, AttributeError):
        return None
    return (fd, libc) if fd >= 0 else None


class DeadlineTimer:
    """`sleep_until(t)` for one greenlet at a time (the scheduler's); `close()` frees the fd."""

    def __init__(self) -> None:
        opened = _open_timerfd()
        self._fd: int | None = opened[0] if opened else None
        self._libc = opened[1] if opened else None

    @property
    def precise(self) -> bool:
        return self._fd is not None

    def sleep_until(self, deadline: float) -> None:
        """Return at `deadline` (a `time.monotonic()` value) or at once if it has passed."""
        delay = deadline - time.monotonic()
        if delay <= 0:
            return
        if self._fd is None or not self._arm(deadline):
            gevent.sleep(delay)
            return
        gevent.socket.wait_read(self._fd)
        # Reading the expiry count disarms the readiness; BlockingIOError: woken by something
        # else, and the instant has passed anyway.
        with contextlib.suppress(BlockingIOError):
            os.read(self._fd, 8)

    def _arm(self, deadline: float) -> bool:
        seconds = int(deadline)
        value = _Timespec(seconds, int((deadline - seconds) * 1e9))
        spec = _Itimerspec(_Timespec(0, 0), value)
        armed = self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None)
        return armed == 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
