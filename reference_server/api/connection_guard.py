"""Who may hold a connection, counted: the accounting behind the server's connection caps.

Owns `ConnectionGuard` (every open connection of one server; which of them are admitted under
`max_connections` and `max_connections_per_client`; which admitted ones are idle between
requests; the requests in progress per forwarded client behind a trusted proxy) and
`ConnectionLimits`. The rules (docs/server.md, "Connection limits"):

- a new connection is *admitted* while its address and the server are under their caps; over a
  cap, the longest-idle admitted connection (a keep-alive one between requests: it has answered
  at least one request and received no byte of the next) of that address / of all gives way;
- a connection that has not finished its first request is never the one that gives way: its
  request may already be on the wire (issue 38: a burst of 1,500 connections from one load
  generator lost its oldest requests that way);
- with nothing idle to close, the connection is *overflow*: it stays open until its request
  head is read, and that request is then refused with a complete 503 (or served when it is
  `/health` or `/metrics`, or when a place has come free meanwhile); at most
  `overflow_connections` are overflow at once;
- past that (the *ceiling*), the oldest connection that has sent nothing at all (no byte read,
  none waiting in its kernel buffer) gives way, so sockets held open unused never lock
  `/health` out; with none such, the new connection is *over the ceiling*: it is answered 503
  at once, without its head being read (the only refusal that does not read the head);
- behind a proxy `--trusted-proxies` names, the per-client cap counts the requests in progress
  of each forwarded client (X-Forwarded-For), since one proxy connection carries many clients'
  requests; the proxy's own connections count only against `max_connections`.

It knows nothing about HTTP parsing or responses (connections.py); the connection objects it
is given need `peer`, `transport` and `client_key` attributes and a `pending_input()` method
(bytes waiting in the socket's kernel buffer).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "Admission", "ConnectionGuard", "ConnectionLimits", "TrustedProxies", "forwarded_client",
]  # fmt: skip

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# Silent connections looked at per arrival past the ceiling (each costs one ioctl).
_SILENT_SCAN = 64


class Admission(Enum):
    ADMITTED = "admitted"
    OVERFLOW = "overflow"  # its request is refused 503 once its head is read
    OVER_CEILING = "over_ceiling"  # answered 503 at once


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    max_connections: int
    max_connections_per_client: int
    header_timeout_seconds: float
    max_header_bytes: int
    max_header_count: int
    # Connections over a cap kept open to be answered (their head is read first). 0: the
    # default, max(32, max_connections): a burst twice the cap is refused after reading.
    overflow_connections: int = 0

    @property
    def overflow_allowance(self) -> int:
        return self.overflow_connections or max(32, self.max_connections)


class TrustedProxies:
    """The addresses `--trusted-proxies` names (comma-separated addresses or networks)."""

    def __init__(self, text: str | None) -> None:
        self._networks: list[_Network] = []
        for item in (text or "").split(","):
            if item.strip():
                self._networks.append(ipaddress.ip_network(item.strip(), strict=False))

    def __bool__(self) -> bool:
        return bool(self._networks)

    def __contains__(self, host: object) -> bool:
        if not isinstance(host, str) or not self._networks:
            return False
        try:
            address = ipaddress.ip_address(host.strip().strip("[]"))
        except ValueError:
            return False
        return any(address in network for network in self._networks)


def forwarded_client(values: Iterable[bytes], trusted: TrustedProxies) -> str | None:
    """The client X-Forwarded-For names: the rightmost address not itself a trusted proxy (what
    uvicorn's proxy middleware puts in the request's scope), or the leftmost if all are."""
    hosts = [h.strip() for v in values for h in v.decode("latin-1").split(",") if h.strip()]
    for host in reversed(hosts):
        if host not in trusted:
            return host
    return hosts[0] if hosts else None


@dataclass
class ConnectionGuard:
    """Open connections, the admitted ones by client, and the idle ones in the order they
    became idle. `on_refusal(reason)` is told of every refusal (a metrics counter)."""

    limits: ConnectionLimits
    trusted: TrustedProxies = field(default_factory=lambda: TrustedProxies(None))
    on_refusal: Callable[[str], None] | None = None
    open: dict[Any, None] = field(default_factory=dict)
    admitted: dict[Any, None] = field(default_factory=dict)
    admitted_by_client: dict[str, dict[Any, None]] = field(default_factory=dict)
    idle: dict[Any, None] = field(default_factory=dict)
    idle_by_client: dict[str, dict[Any, None]] = field(default_factory=dict)
    forwarded_busy: dict[str, int] = field(default_factory=dict)
    silent: dict[Any, None] = field(default_factory=dict)  # no byte read yet, oldest first
    num_evicted: int = 0
    num_refused: int = 0

    def client_key(self, peer: str) -> str | None:
        """The per-client key of a connection from `peer`; None for a trusted proxy (its
        requests are counted by forwarded client instead)."""
        return None if peer in self.trusted else peer

    def opened(self, conn: Any) -> Admission:
        self.open[conn] = None
        self.silent[conn] = None
        # Again after each silent connection that gives way, until there is a place or no
        # silent one is left (each pass closes one, so this ends): an admitted silent one of
        # another client frees no overflow place, and stopping there would have closed it for
        # nothing and refused the newcomer anyway.
        while True:
            if self._admit(conn):
                return Admission.ADMITTED
            if len(self.open) - len(self.admitted) <= self.limits.overflow_allowance:
                return Admission.OVERFLOW
            if not self._evict_silent(keep=conn):
                return Admission.OVER_CEILING

    def heard_from(self, conn: Any) -> None:
        """`conn` has sent a byte: from now on it is never closed for another connection
        until it has answered a request and gone idle."""
        self.silent.pop(conn, None)

    def closed(self, conn: Any) -> None:
        if conn not in self.open:
            return
        del self.open[conn]
        self.silent.pop(conn, None)
        self.release_forwarded(conn)
        if conn not in self.admitted:
            return
        del self.admitted[conn]
        key = conn.client_key
        if key is not None:
            own = self.admitted_by_client[key]
            del own[conn]
            if not own:
                del self.admitted_by_client[key]
        self.set_idle(conn, False)

    def is_admitted(self, conn: Any) -> bool:
        return conn in self.admitted

    def admit_late(self, conn: Any) -> bool:
        """An overflow connection whose request head is complete: admitted if a place has
        come free (or an idle connection can give way) since it was opened."""
        return conn in self.admitted or (conn in self.open and self._admit(conn))

    def set_idle(self, conn: Any, idle: bool) -> None:
        """Idle: an admitted connection between requests, after at least one response."""
        key = conn.client_key
        if idle:
            if conn not in self.admitted:
                return
            self.idle[conn] = None
            if key is not None:
                self.idle_by_client.setdefault(key, {})[conn] = None
            return
        self.idle.pop(conn, None)
        own = self.idle_by_client.get(key) if key is not None else None
        if own is not None:
            own.pop(conn, None)
            if not own:
                del self.idle_by_client[key]  # type: ignore[arg-type]

    def hold_forwarded(self, conn: Any, client: str) -> bool:
        """A request through a trusted proxy from `client`: False when that client already has
        `max_connections_per_client` requests in progress."""
        self.release_forwarded(conn)  # a pipelined request replaces the previous one's hold
        busy = self.forwarded_busy.get(client, 0)
        if busy >= self.limits.max_connections_per_client:
            return False
        self.forwarded_busy[client] = busy + 1
        conn.forwarded = client
        return True

    def release_forwarded(self, conn: Any) -> None:
        client = getattr(conn, "forwarded", None)
        if client is None:
            return
        conn.forwarded = None
        left = self.forwarded_busy[client] - 1
        if left:
            self.forwarded_busy[client] = left
        else:
            del self.forwarded_busy[client]

    def refused(self, reason: str) -> None:
        self.num_refused += 1
        if self.on_refusal is not None:
            self.on_refusal(reason)

    def _admit(self, conn: Any) -> bool:
        limits = self.limits
        key = conn.client_key
        if key is not None:
            own = self.admitted_by_client.get(key, {})
            if len(own) >= limits.max_connections_per_client and not self._evict(
                self.idle_by_client.get(key, {})
            ):
                return False
        if len(self.admitted) >= limits.max_connections and not self._evict(self.idle):
            return False
        self.admitted[conn] = None
        if key is not None:
            self.admitted_by_client.setdefault(key, {})[conn] = None
        return True

    def _evict_silent(self, *, keep: Any) -> bool:
        """Closes the oldest connection that has sent nothing (read or waiting); looks at a
        bounded number, since a burst's newest connections have their bytes on the way."""
        for victim in list(self.silent)[:_SILENT_SCAN]:
            if victim is not keep and victim.pending_input() == 0:
                self.num_evicted += 1
                self.closed(victim)
                victim.transport.close()
                return True
        return False

    def _evict(self, pool: dict[Any, None]) -> bool:
        for victim in pool:
            self.num_evicted += 1
            self.closed(victim)  # counted out now: its connection_lost comes later
            victim.transport.close()
            return True
        return False
