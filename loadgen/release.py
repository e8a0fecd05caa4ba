"""Releasing the open loop's requests at their planned instants, each burst written before any
of its answers is read.

Owns the hand-off between the open-loop scheduler (`loadgen.session`) and its request
greenlets: a request is prepared (its record, concurrency slot and body) `PREPARE_LEAD_SECONDS`
before its planned instant and then waits on that instant's `Release`; the scheduler releases
it at the instant from its precise timer (`loadgen.deadline`). It does not plan, time, send or
record anything.

Why, measured replaying the Mooncake trace (timestamps in 3 s steps: bursts of up to 19
requests at one instant) at 200 req/s on a 2-core machine:
- spawning and preparing a burst after its instant put ~0.3 ms before the first request was
  sent, and ~20-40 us before each of the others;
- the first request of a burst, its answer already there, ran to its end (parse, record,
  sink) before the next one was sent: ~0.8 ms of schedule lag for the rest of the burst.
Prepared ahead, a released request only stamps `sent_at` and writes; after writing it yields
while others of its instant are still to be written, so the burst goes out first.
"""

from __future__ import annotations

import gevent
import gevent.event

__all__ = ["PREPARE_LEAD_SECONDS", "Member", "Release"]

# Ahead of the planned instant: enough to spawn and prepare a burst of tens of requests, little
# enough that a request is never prepared long before it is sent (its connection stays fresh).
PREPARE_LEAD_SECONDS = 0.002


class Release:
    """One planned instant: its requests wait on it; `release()` lets them all go."""

    __slots__ = ("_event", "unwritten")

    def __init__(self) -> None:
        self._event = gevent.event.Event()
        self.unwritten = 0  # members neither written nor given up

    def member(self) -> Member:
        self.unwritten += 1
        return Member(self)

    def release(self) -> None:
        self._event.set()

    @property
    def released(self) -> bool:
        return self._event.is_set()

    def wait(self) -> None:
        self._event.wait()


class Member:
    """One request's place in its instant's burst. Call `wait` before sending, `written` once
    the request is on the wire, and `settle` when the request is over (idempotent)."""

    __slots__ = ("_release", "_settled")

    def __init__(self, release: Release) -> None:
        self._release = release
        self._settled = False

    def wait(self) -> None:
        self._release.wait()

    def written(self) -> None:
        """Yield once if others of the burst are still to be written (their sends first)."""
        self.settle()
        if self._release.unwritten > 0:
            gevent.sleep(0)

    def settle(self) -> None:
        if not self._settled:
            self._settled = True
            self._release.unwritten -= 1
