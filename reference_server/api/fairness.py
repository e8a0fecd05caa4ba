"""Each client's share of the engine's running slots, enforced when a completion is admitted.

Owns `ClientShares`: the completions in flight per client key (the API key when the request
carries one, else the peer address) and the rule that decides, at arrival, whether one more is
fair. A client alone may use the whole server (running slots and queue alike); the share
applies only under contention, i.e. when another client also has requests in flight and every
running slot (`max_num_seqs`, read live) is taken:

- share = `client_share_ratio` x `max_num_seqs` when set, else `max_num_seqs` / active clients
  (rounded up, at least 1);
- a client at or over its share gets 429 `client_over_share` with `Retry-After`;
- a client under its share is admitted, and the newest *queued* requests (no output yet, so no
  headers sent) of clients over their share are shed with the same 429, so the newcomer is not
  stuck behind one client's queue. Requests already streaming are never shed.

It knows nothing about the engine beyond the capacity callable, nor about HTTP beyond the error.

Why an admission rule lives in the HTTP layer and not in the scheduler: a client is an HTTP
fact (the API key, else the peer address) the engine never sees, and the rule's answer is an
HTTP answer — a 429 with `Retry-After` — that is only honest before a response has started: a
request is shed only while it has no output, so no headers are sent. The scheduler decides what
runs among the requests admitted (priority classes, the token budget, preemption); this decides
which requests are admitted at all, per client, and reads the engine only through
`capacity_fn` (`max_num_seqs`, live). Moving it into the scheduler would need client identity
on every request and a way to turn a queued request back into a 429 (docs/server.md,
"Per-client fairness").
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from reference_server.api.errors import APIError

__all__ = ["ClientShares", "Ticket", "over_share_error"]

# How long an admitted request waits for the queued requests it shed to leave the engine.
_SETTLE_SECONDS = 1.0


@dataclass(eq=False)
class Ticket:
    """One admitted completion. `shed` resolves when fairness takes its place back."""

    key: str
    started: bool = False
    released: bool = False
    shed: asyncio.Future[None] = field(default_factory=lambda: _loop().create_future())
    done: asyncio.Event = field(default_factory=asyncio.Event)
    to_settle: list[Ticket] = field(default_factory=list)

    async def settle(self) -> None:
        """Waits (bounded) for the requests this admission shed to be gone from the engine."""
        if self.to_settle:
            waits = [asyncio.ensure_future(t.done.wait()) for t in self.to_settle]
            self.to_settle = []
            _, pending = await asyncio.wait(waits, timeout=_SETTLE_SECONDS)
            for wait in pending:
                wait.cancel()


def _loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def over_share_error(share: int | None) -> APIError:
    """`share`: the client's share at refusal; None when a queued request was shed."""
    if share is None:
        message = ("this request was queued while its client held more than its share of the "
                   "server and other clients waited; retry shortly")  # fmt: skip
    else:
        message = (f"this client already has its share ({share}) of the server's running "
                   "requests while other clients wait; retry shortly")  # fmt: skip
    return APIError(
        429,
        message,
        type="rate_limit_exceeded",
        code="client_over_share",
        headers={"Retry-After": "1"},
    )


class ClientShares:
    def __init__(
        self, *, enabled: bool, share_ratio: float | None, capacity_fn: Callable[[], int]
    ) -> None:
        self._enabled = enabled
        self._share_ratio = share_ratio
        self._capacity_fn = capacity_fn
        self._in_flight: dict[str, list[Ticket]] = {}  # admission order
        self._total = 0
        self.num_refused = 0
        self.num_shed = 0

    @staticmethod
    def client_key(request: Request, api_key_header: str | None) -> str:
        if api_key_header:
            digest = hashlib.sha256(api_key_header.encode("utf-8")).hexdigest()[:16]
            return f"key:{digest}"  # never the key itself: keys end up in logs and dumps
        return f"addr:{request.client.host if request.client else '?'}"

    def admit(self, key: str) -> Ticket:
        own = self._in_flight.get(key, [])
        active = len(self._in_flight) + (0 if own else 1)
        ticket = Ticket(key=key)
        if self._enabled and active > 1:
            capacity = max(1, int(self._capacity_fn()))
            if self._total >= capacity:
                share = self._share(capacity, active)
                if len(own) >= share:
                    self.num_refused += 1
                    raise over_share_error(share)
                ticket.to_settle = self._shed_over(share, keep=key)
        self._in_flight.setdefault(key, []).append(ticket)
        self._total += 1
        return ticket

    def release(self, ticket: Ticket) -> None:
        ticket.done.set()
        if ticket.released:
            return
        ticket.released = True
        own = self._in_flight.get(ticket.key)
        if own is None:
            return
        own.remove(ticket)
        if not own:
            del self._in_flight[ticket.key]
        self._total -= 1

    def _share(self, capacity: int, active: int) -> int:
        if self._share_ratio is not None:
            return max(1, math.floor(self._share_ratio * capacity))
        return max(1, math.ceil(capacity / active))

    def _shed_over(self, share: int, *, keep: str) -> list[Ticket]:
        shed: list[Ticket] = []
        for key, tickets in list(self._in_flight.items()):
            excess = len(tickets) - share
            if key == keep or excess <= 0:
                continue
            for ticket in [t for t in reversed(tickets) if not t.started][:excess]:
                ticket.shed.set_result(None)
                self.release(ticket)
                ticket.done.clear()  # set again when its request has really ended
                self.num_shed += 1
                shed.append(ticket)
        return shed
