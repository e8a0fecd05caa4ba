"""loadgen.deadline: the open-loop scheduler's wait returns at its instant, not before, and never
raises where timerfd is missing."""

from __future__ import annotations

import time

import gevent

from loadgen import deadline
from loadgen.deadline import DeadlineTimer


def test_never_returns_before_the_deadline_and_a_past_deadline_returns_at_once():
    timer = DeadlineTimer()
    try:
        for delay in (0.0003, 0.002, 0.0101):
            target = time.monotonic() + delay
            timer.sleep_until(target)
            assert time.monotonic() >= target
        began = time.monotonic()
        timer.sleep_until(began - 1.0)
        # Returning at once needs no timing bound: a past deadline arms nothing, so a wait on
        # the fd would block forever and the test would hang, not pass.
        assert time.monotonic() >= began
    finally:
        timer.close()


def test_other_greenlets_run_while_it_waits():
    timer = DeadlineTimer()
    ran: list[float] = []
    try:
        other = gevent.spawn(lambda: ran.append(time.monotonic()))
        target = time.monotonic() + 0.01
        timer.sleep_until(target)
        other.join()
        assert ran and ran[0] < target
    finally:
        timer.close()


def test_falls_back_to_gevent_sleep_without_timerfd(monkeypatch):
    monkeypatch.setattr(deadline, "_open_timerfd", lambda: None)
    timer = DeadlineTimer()
    assert not timer.precise
    began = time.monotonic()
    timer.sleep_until(began + 0.003)  # gevent.sleep: coarser, and it may fire on a cached "now"
    assert time.monotonic() > began
    timer.close()


def test_linux_gets_the_precise_timer():
    import sys

    timer = DeadlineTimer()
    try:
        assert timer.precise == sys.platform.startswith("linux")
    finally:
        timer.close()
