"""Grouping a trace's requests into conversations, each in turn order.

Owns `TraceSession` and `session_groups`: which requests belong to one conversation (Bailian's
chain of `parent_chat_id`, resolved by the reader to the root chat's id; our jsonl's `session`)
and their order, so that a replayer sends turn k+1 only after turn k was answered. A request
without a session is a conversation of its own. It does not send or wait for anything, and it
does not decide how the later turns' timestamps are honoured (the replayer's business).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.traces.request import TraceRequest

__all__ = ["TraceSession", "session_groups"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceSession:
    session: str | None  # None: a request that belongs to no conversation
    requests: tuple[TraceRequest, ...]  # in turn order; equal turns (branches) in file order

    @property
    def first_timestamp_seconds(self) -> float:
        return min(r.timestamp_seconds for r in self.requests)


def session_groups(requests: Iterable[TraceRequest]) -> tuple[TraceSession, ...]:
    """Conversations in the order of their first request; each one's requests by turn.

    A conversation where some request lacks `turn` is ordered by file position instead (which is
    time order: readers refuse unsorted files).
    """
    grouped: dict[str, list[TraceRequest]] = {}
    order: list[tuple[str | None, list[TraceRequest]]] = []
    for request in requests:
        if request.session is None:
            order.append((None, [request]))
            continue
        members = grouped.get(request.session)
        if members is None:
            members = grouped[request.session] = []
            order.append((request.session, members))
        members.append(request)
    return tuple(
        TraceSession(session=session, requests=_in_turn_order(members))
        for session, members in order
    )


def _in_turn_order(members: list[TraceRequest]) -> tuple[TraceRequest, ...]:
    if any(r.turn is None for r in members):
        return tuple(sorted(members, key=lambda r: r.index))
    return tuple(sorted(members, key=lambda r: (r.turn or 0, r.index)))
