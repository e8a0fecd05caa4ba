"""Server-sent events: the `data: ...` framing and a streaming response that notices hang-ups.

Owns the wire format of one SSE event and `EventStreamResponse`, an ASGI response that sends an
async iterator of events while watching the connection: when the client disconnects, the
producing iterator is cancelled and closed at once (so the request behind it is aborted), instead
of being discovered only at the next write. It knows nothing about OpenAI chunk contents.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

__all__ = ["RAW_SEND_KEY", "SSE_DONE", "EventStreamResponse", "sse_event", "wait_for_disconnect"]

# The server's own `send`, stored in the scope before Starlette wraps it (see app.py). Starlette's
# error middlewares wrap `send` only to learn whether the response has started; once the start
# message went through them, body chunks can skip those per-token wrapper calls.
RAW_SEND_KEY = "batchgate.raw_send"

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

    def __init__(self, events: AsyncIterator[bytes], *, headers: dict[str, str] | None = None):
        self._events = events
        self._headers = list(_HEADERS)
        for name, value in (headers or {}).items():
            self._headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        self.disconnected = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        producer = asyncio.ensure_future(self._produce(send, scope.get(RAW_SEND_KEY, send)))
        watcher = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            done, _ = await asyncio.wait((producer, watcher), return_when=asyncio.FIRST_COMPLETED)
            if producer not in done:
                self.disconnected = True
                producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
        finally:
            watcher.cancel()
            if not producer.done():
                producer.cancel()
            # Both must have stopped before the iterator can be closed from here.
            await asyncio.gather(producer, watcher, return_exceptions=True)
            # Closing the iterator runs its `finally`/`aclosing` blocks, which abort the request.
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _produce(self, send: Send, body_send: Send) -> None:
        # The start goes through the wrapped `send`, so the middlewares know headers are gone.
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        async for chunk in self._events:
            await body_send({"type": "http.response.body", "body": chunk, "more_body": True})
        await body_send({"type": "http.response.body", "body": b"", "more_body": False})
