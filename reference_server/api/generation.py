"""Serving one completion request: engine stream in, OpenAI JSON or SSE chunks out.

Owns the chat/completions response shapes (non-streaming body, streaming chunks with the role
first, a final finish chunk, the optional usage chunk and `[DONE]`; with vLLM's
`continuous_usage_stats` every chunk also carries the cumulative usage), finish-reason mapping, and
each request's server-side timings for the TTFT / inter-token / end-to-end / queue histograms.
The engine is consumed through `AsyncEngine.generate`; a client hang-up closes that stream,
which aborts the request. It knows nothing about parsing (protocol.py) or routing (app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.types import Receive

from reference_server.api.errors import APIError, from_engine_error
from reference_server.api.fairness import Ticket, over_share_error
from reference_server.api.metrics import ServerMetrics
from reference_server.api.protocol import GenerationRequest
from reference_server.api.response_shapes import ResponseShapes, finish_reason
from reference_server.api.sse import SSE_DONE, EventStreamResponse, sse_event, wait_for_disconnect
from reference_server.errors import EngineError

__all__ = [
    "ClientGone", "RequestTimer", "ResponseShapes", "Shed", "run_generation", "until_disconnect",
]  # fmt: skip

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


class Shed(Exception):
    """Fairness took the request's place back before it produced output (fairness.py)."""


async def until_disconnect(
    receive: Receive, awaitable: Awaitable[T], *, shed: asyncio.Future[None] | None = None
) -> T:
    """Await `awaitable`, cancelling it (and raising ClientGone) if the client hangs up first,
    or raising Shed when `shed` resolves first."""
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    waits: tuple[asyncio.Future[Any], ...] = (work, watcher)
    if shed is not None:
        waits += (shed,)
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not work.done():
            work.cancel()
        await asyncio.gather(work, watcher, return_exceptions=True)
    if work.cancelled():
        if shed is not None and shed.done():
            raise Shed()
        raise ClientGone()
    return work.result()


class RequestTimer:
    """Server-side timings of one request, fed to the histograms when it ends."""

    def __init__(self, metrics: ServerMetrics, priority: str) -> None:
        self._metrics = metrics
        self._priority = priority
        self._arrival: float | None = None
        self._queue_seconds: float | None = None
        self._ttft_seconds: float | None = None
        self._last_token_at: float | None = None
        self._gaps: list[float] = []
        self._e2e_seconds: float | None = None
        self._reported = False

    def on_output(self, output: Any) -> None:
        now = time.monotonic()
        if self._arrival is None:
            self._arrival = output.arrival_time
        if self._queue_seconds is None and output.first_scheduled_time is not None:
            self._queue_seconds = output.first_scheduled_time - output.arrival_time
        count = len(output.new_token_ids)
        if count:
            if self._last_token_at is None:
                first = output.first_token_time if output.first_token_time is not None else now
                self._ttft_seconds = first - output.arrival_time
                if output.finished and count > 1:
                    # A request delivered once, at its end (AsyncEngine stream=False): its
                    # tokens' gaps are the mean time per output token after the first.
                    self._gaps.extend([(now - first) / (count - 1)] * (count - 1))
                else:
                    # Tokens delivered with the first one arrived with no gap of their own.
                    self._gaps.extend([0.0] * (count - 1))
            else:
                self._gaps.extend([(now - self._last_token_at) / count] * count)
            self._last_token_at = now
        if output.finished and output.finish_reason != "abort":
            self._e2e_seconds = now - output.arrival_time

    def report(self) -> None:
        if self._reported:
            return
        self._reported = True
        self._metrics.observe_request(
            priority=self._priority,
            ttft_seconds=self._ttft_seconds,
            inter_token_seconds=self._gaps,
            e2e_seconds=self._e2e_seconds,
            queue_seconds=self._queue_seconds,
        )


async def run_generation(
    *,
    engine: Any,
    request: GenerationRequest,
    model: str,
    metrics: ServerMetrics,
    receive: Receive,
    on_done: Any,
    stall_timeout_seconds: float | None = None,
    ticket: Ticket | None = None,
) -> EventStreamResponse | dict[str, Any] | None:
    """Start the request; returns an SSE response, a JSON body, or None if the client left.

    Admission and validation errors surface before anything is sent, so they become proper
    HTTP statuses; so does fairness shedding the request (`ticket.shed`) while it is queued.
    `on_done()` is called exactly once when the request is over.
    """
    shapes = ResponseShapes(request, model)
    timer = RequestTimer(metrics, request.priority)
    stream: Any = None
    handed_over = False
    try:
        try:
            stream = engine.generate(
                shapes.request_id,
                request.prompt_token_ids,
                request.params,
                priority=request.priority,
            )
            shed = ticket.shed if ticket is not None else None
            first = await until_disconnect(receive, stream.__anext__(), shed=shed)
        except EngineError as exc:
            raise from_engine_error(exc) from None
        except ClientGone:
            return None
        except Shed:
            raise over_share_error(None) from None
        except StopAsyncIteration:
            raise APIError(
                503, "engine ended the request without output", type="server_error"
            ) from None
        if ticket is not None:
            ticket.started = True
        timer.on_output(first)
        if request.stream:
            handed_over = True
            sink = _TokenSink(engine, shapes, timer)
            sink.response = EventStreamResponse(
                _events(shapes, stream, first, timer, on_done, sink.arm),
                stall_timeout_seconds=stall_timeout_seconds,
            )
            return sink.response
        try:
            return await until_disconnect(receive, _collect(shapes, stream, first, timer))
        except ClientGone:
            return None
    finally:
        if not handed_over:
            if stream is not None:
                await stream.aclose()
            timer.report()
            on_done()


async def _collect(
    shapes: ResponseShapes, stream: AsyncIterator[Any], output: Any, timer: RequestTimer
) -> dict[str, Any]:
    pieces = [output.new_text]
    reasoning = [output.new_reasoning_text]
    try:
        while not output.finished:
            output = await stream.__anext__()
            timer.on_output(output)
            pieces.append(output.new_text)
            reasoning.append(output.new_reasoning_text)
    except EngineError as exc:
        raise from_engine_error(exc) from None
    except StopAsyncIteration:
        pass
    if output.finish_reason == "abort":
        raise APIError(
            503,
            "request aborted before completion (server draining)",
            type="service_unavailable",
            code="aborted",
        )
    return shapes.body("".join(pieces), output, "".join(reasoning))


class _TokenSink:
    """A streamed request's token chunks written where the engine delivers them (a sink of the
    engine's request streams, request_streams.py): one transport write a token instead of a
    wake-up of the response's task and its chain of iterators, which at 64 streams made each
    step a burst of 64 task switches that /health and /metrics probes waited behind. It declines
    the finished output (the tail is `_events`') and any output the response cannot send at once
    (a client reading slowly): that one and the rest then go through `_events`, in order, which
    arms the sink again before it next waits."""

    def __init__(self, engine: Any, shapes: ResponseShapes, timer: RequestTimer) -> None:
        self._set_sink = getattr(engine, "set_sink", None)
        self._shapes = shapes
        self._timer = timer
        self.response: EventStreamResponse | None = None

    def arm(self) -> None:
        if self._set_sink is not None and self.response is not None:
            self._set_sink(self._shapes.request_id, self)

    def __call__(self, output: Any) -> bool:
        response = self.response
        if output.finished or response is None:
            return False
        # An output without text (a partial UTF-8 character) sends nothing, but it is taken only
        # where a chunk could go, so the timer sees outputs in their order.
        if output.new_reasoning_text:
            chunk = self._shapes.text_chunks(output)
        else:
            text = output.new_text
            chunk = self._shapes.content_chunk(text, output) if text else b""
        if not response.write_now(chunk):
            return False
        self._timer.on_output(output)
        return True


async def _events(
    shapes: ResponseShapes,
    stream: AsyncIterator[Any],
    output: Any,
    timer: RequestTimer,
    on_done: Any,
    arm_sink: Callable[[], None] | None = None,
) -> AsyncIterator[bytes]:
    try:
        # Chat's role chunk leaves in the same write as the first text when that is ready.
        pending = shapes.role_chunk(output) if shapes.chat else b""
        if pending and not (output.new_text or output.new_reasoning_text):
            yield pending
            pending = b""
        while True:
            if output.new_text or output.new_reasoning_text:
                yield pending + shapes.text_chunks(output)
                pending = b""
            if output.finished:
                break
            if arm_sink is not None:
                arm_sink()  # everything this iterator yielded has been sent
            try:
                output = await stream.__anext__()
            except StopAsyncIteration:
                break
            timer.on_output(output)
        # The tail leaves in one write: finish chunk, usage chunk, [DONE].
        tail = shapes.finish_chunk(finish_reason(output), output)
        if shapes.include_usage:
            tail += shapes.usage_chunk(output)
        yield tail + SSE_DONE
    except EngineError as exc:
        # Headers are gone already: the error travels as an event, as OpenAI's API does.
        yield sse_event(from_engine_error(exc).to_dict())
        yield SSE_DONE
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()  # aborts the request if it is still running
        timer.report()
        on_done()
