"""Server-sent events: the `data: ...` framing and a streaming response that notices hang-ups.

Owns the wire format of one SSE event and `EventStreamResponse`, an ASGI response that sends an
async iterator of events while watching the connection: when the client disconnects, the
producing iterator is cancelled and closed at once (so the request behind it is aborted), instead
of being discovered only at the next write. A client that stops reading is caught the same way:
once one write has waited `stall_timeout_seconds` (the transport's buffer stays above its
high-water mark, so the server's `send` does not return), the iterator is closed and the
connection reset through the server's `ABORT_KEY` callable, freeing the request's KV blocks and
the buffered bytes. It knows nothing about OpenAI chunk contents.

Between two events of its iterator the response can also take a chunk written from outside it
(`write_now`, for a producer that writes a token's chunk where the engine delivers it instead of
waking the iterator's task): only while nothing of its own is being sent and the transport takes
bytes at once, so chunks never overtake each other and a client that stops reading is still met
by the response's own awaited writes (and its stall watch).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from reference_server.api.disconnects import log_client_gone

__all__ = [
    "ABORT_KEY", "RAW_SEND_KEY", "SSE_DONE", "WRITE_NOW_KEY", "EventStreamResponse", "sse_event",
    "wait_for_disconnect",
]  # fmt: skip

# The server's own `send`, stored in the scope before Starlette wraps it (see app.py). Starlette's
# error middlewares wrap `send` only to learn whether the response has started; once the start
# message went through them, body chunks can skip those per-token wrapper calls.
RAW_SEND_KEY = "batchgate.raw_send"
# A callable in the scope that resets the connection (connections.py provides it); without one a
# stalled stream is still closed, and the server closes the socket its own way.
ABORT_KEY = "batchgate.abort_connection"
# A callable in the scope that writes one body chunk of the started response at once, without an
# await, and returns False (writing nothing) when it cannot: the transport's buffer is above its
# high-water mark, the client has gone, the response has not started or has ended
# (connections.py provides it). Without one, every chunk goes through the awaited `send`.
WRITE_NOW_KEY = "batchgate.write_body_now"
# How many checks make up the stall timeout: its resolution, at no cost per token.
_STALL_CHECKS = 5

SSE_DONE = b"data: [DONE]\n\n"
_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Stops nginx-style proxies from buffering the stream into one late blob.
    (b"x-accel-buffering", b"no"),
]


def sse_event(payload: Any) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns once the client has gone (the request body must already have been read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class EventStreamResponse:
    """Streams `events` (already framed bytes) and cancels them if the client hangs up."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        *,
        headers: dict[str, str] | None = None,
        stall_timeout_seconds: float | None = None,
    ):
        self._events = events
        self._headers = list(_HEADERS)
        for name, value in (headers or {}).items():
            self._headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        self._stall_timeout_seconds = stall_timeout_seconds
        self._in_send = False
        self._num_sent = 0
        self._write_now: Callable[[bytes], bool] | None = None
        self.disconnected = False
        self.stalled = False

    def write_now(self, chunk: bytes) -> bool:
        """Send `chunk` (whole events) at once, between the iterator's own events; False, and
        nothing sent, when that cannot be done without waiting or out of order. An empty chunk
        sends nothing: it asks whether a chunk could go now."""
        write = self._write_now
        if write is None or self._in_send or not write(chunk):
            return False
        if chunk:
            self._num_sent += 1
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._write_now = scope.get(WRITE_NOW_KEY)
        producer = asyncio.ensure_future(self._produce(send, scope.get(RAW_SEND_KEY, send)))
        watchers = [asyncio.ensure_future(wait_for_disconnect(receive))]
        if self._stall_timeout_seconds is not None:
            watchers.append(asyncio.ensure_future(self._watch_stall(self._stall_timeout_seconds)))
        try:
            done, _ = await asyncio.wait((producer, *watchers), return_when=asyncio.FIRST_COMPLETED)
            if producer not in done:
                self.stalled = watchers[0] not in done
                self.disconnected = not self.stalled
                producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
        finally:
            self._write_now = None  # nothing more goes out past the producer
            for watcher in watchers:
                watcher.cancel()
            if not producer.done():
                producer.cancel()
            # All must have stopped before the iterator can be closed from here.
            await asyncio.gather(producer, *watchers, return_exceptions=True)
            # Closing the iterator runs its `finally`/`aclosing` blocks, which abort the request.
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
        if self.stalled:
            log_client_gone(scope, f"(stopped reading for {self._stall_timeout_seconds:g} s)")
            abort = scope.get(ABORT_KEY)
            if abort is not None:
                abort()
        elif self.disconnected:
            log_client_gone(scope, "mid-stream of")

    async def _produce(self, send: Send, body_send: Send) -> None:
        # The start goes through the wrapped `send`, so the middlewares know headers are gone.
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        async for chunk in self._events:
            self._in_send = True
            await body_send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._in_send = False
            self._num_sent += 1
        await body_send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch_stall(self, timeout_seconds: float) -> None:
        """Returns once one write has been pending for `timeout_seconds` (to within a fifth)."""
        interval = timeout_seconds / _STALL_CHECKS
        seen = -1
        stuck = 0
        while stuck < _STALL_CHECKS:
            await asyncio.sleep(interval)
            if self._in_send and self._num_sent == seen:
                stuck += 1
            else:
                stuck = 1 if self._in_send else 0
                seen = self._num_sent
