"""RequestStreams: the consumer side of an engine — one asyncio queue per request in flight, fed
from whatever thread produces the engine's outputs.

Both engine front ends use it: AsyncEngine (the step loop on a thread of this process) and
EngineCoreClient (the step loop in a child process, outputs arriving over a pipe). It owns the
per-request queues, the outputs held back for non-streamed requests, the drain waiters, the
pending futures and the death notice. It knows nothing about how outputs are produced.

A consumer may also take its outputs where they arrive instead of through its queue (`set_sink`,
used by streaming HTTP responses): a sink is a callable run on the consumer's loop that handles an
output there and then (writes its chunk) or declines it. Waking a consumer task costs the event
loop far more than the write itself, and at 64 streams that is 64 wake-ups a step. A sink is
offered an output only while the queue is empty, and it is dropped at its first refusal (that
output and every later one go to the queue, in order) until the consumer sets it again; errors
always go to the queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from reference_server.errors import EngineDeadError, RequestValidationError
from reference_server.outputs import RequestOutput

__all__ = ["RequestStreams", "Sink"]

logger = logging.getLogger(__name__)

# Handles an output on the consumer's loop (True) or declines it (False: it goes to the queue).
Sink = Callable[[RequestOutput], bool]


class _Stream:
    """One consumer: its loop, its queue, and its sink while it has one."""

    __slots__ = ("loop", "queue", "sink")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.sink: Sink | None = None


class RequestStreams:
    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}
        # Requests delivered once, at the end (stream=False): the pieces so far.
        self._held: dict[str, tuple[list[str], list[int], list[str]]] = {}
        self._lock = threading.Lock()
        self._drain_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._death_handlers: list[Callable[[BaseException], None]] = []

    # -- the consumer's side (event loop) ---------------------------------------------------

    async def consume(
        self,
        request_id: str,
        *,
        stream: bool,
        submit: Callable[[], None],
        abort: Callable[[], None],
        is_dead: Callable[[], bool],
    ) -> AsyncIterator[RequestOutput]:
        """Register `request_id`, call `submit` (which hands the request to the engine), yield
        its outputs until the finished one. Leaving early calls `abort` unless the engine is
        dead. An exception delivered for the request is raised here."""
        entry = _Stream(asyncio.get_running_loop())
        queue = entry.queue
        with self._lock:
            if request_id in self._streams:
                raise RequestValidationError("request_id", f"{request_id!r} is already in flight")
            self._streams[request_id] = entry
            if not stream:
                self._held[request_id] = ([], [], [])
        finished = False
        try:
            submit()
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if item.finished:
                    finished = True
                    yield item
                    return
                yield item
        finally:
            with self._lock:
                self._streams.pop(request_id, None)
                self._held.pop(request_id, None)
            if not finished and not is_dead():
                abort()

    def set_sink(self, request_id: str, sink: Sink) -> None:
        """Offer `request_id`'s next outputs to `sink` first (call it on the consumer's loop,
        before waiting on the stream again); it stays until it declines one."""
        with self._lock:
            entry = self._streams.get(request_id)
        if entry is not None:
            entry.sink = sink

    def new_future(self) -> concurrent.futures.Future[Any]:
        """A future the producer resolves; failed with the death notice if the engine dies."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget_future)
        return future

    def add_drain_waiter(self) -> asyncio.Event:
        event = asyncio.Event()
        with self._lock:
            self._drain_waiters.append((asyncio.get_running_loop(), event))
        return event

    def on_death(self, handler: Callable[[BaseException], None]) -> None:
        """Call `handler(error)` (on the producer's thread) once the engine has died."""
        self._death_handlers.append(handler)

    # -- the producer's side (any thread) ----------------------------------------------------

    def publish(self, outputs: list[RequestOutput]) -> None:
        # One wake-up per consumer loop per step, not one per output: each
        # call_soon_threadsafe writes to the loop's self-pipe, and at 64 streams that cost
        # competes with the engine for the same cores.
        batches: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, RequestOutput]]] = {}
        with self._lock:
            held = self._held
            for output in outputs:
                entry = self._streams.get(output.request_id)
                if entry is None:
                    continue
                if held and output.request_id in held:
                    output = _hold(held, output)
                    if output is None:
                        continue
                batches.setdefault(entry.loop, []).append((entry, output))
        for loop, items in batches.items():
            _call_soon(loop, _put_all, items)

    def deliver(self, request_id: str, item: RequestOutput | BaseException) -> None:
        with self._lock:
            entry = self._streams.get(request_id)
        if entry is not None:
            _call_soon(entry.loop, entry.queue.put_nowait, item)

    @property
    def has_drain_waiters(self) -> bool:
        return bool(self._drain_waiters)

    def wake_drain_waiters(self) -> None:
        with self._lock:
            waiters, self._drain_waiters = self._drain_waiters, []
        for loop, event in waiters:
            _call_soon(loop, event.set)

    def fail_all(self, error: EngineDeadError, *, died: BaseException | None = None) -> None:
        """Answer every consumer, future and drain waiter with `error`; with `died`, then run
        the death handlers."""
        with self._lock:
            streams = list(self._streams.values())
            futures, self._futures = list(self._futures), set()
        for entry in streams:
            _call_soon(entry.loop, entry.queue.put_nowait, error)
        for future in futures:
            if not future.done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    future.set_exception(error)
        self.wake_drain_waiters()
        if died is not None:
            for handler in self._death_handlers:
                handler(died)

    def _forget_future(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._futures.discard(future)


def _hold(
    held: dict[str, tuple[list[str], list[int], list[str]]], output: RequestOutput
) -> RequestOutput | None:
    """Keep a non-streamed request's pieces; at its end, one output with all of them."""
    texts, token_ids, reasoning = held[output.request_id]
    texts.append(output.new_text)
    token_ids.extend(output.new_token_ids)
    reasoning.append(output.new_reasoning_text)  # thinking mode: always before any answer text
    if not output.finished:
        return None
    del held[output.request_id]
    return dataclasses.replace(
        output,
        new_text="".join(texts),
        new_token_ids=token_ids,
        new_reasoning_text="".join(reasoning),
    )


def _put_all(items: list[tuple[_Stream, RequestOutput]]) -> None:
    """On the consumer's loop: each output to its sink if it has one and nothing waits ahead of
    the output in its queue, else to the queue."""
    for entry, output in items:
        sink = entry.sink
        if sink is not None:
            if entry.queue.empty():
                try:
                    if sink(output):
                        continue
                except Exception:  # the consumer's bug: it gets the output the usual way
                    logger.exception("stream sink failed for %s", output.request_id)
            entry.sink = None
        entry.queue.put_nowait(output)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    if asyncio._get_running_loop() is loop:
        # The producer runs on the consumer's loop (the engine core client): no hand-off.
        fn(*args)
        return
    # RuntimeError: the consumer's loop has closed; nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
