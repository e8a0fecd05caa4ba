"""RequestStreams: the consumer side of an engine — one asyncio queue per request in flight, fed
from whatever thread produces the engine's outputs.

Both engine front ends use it: AsyncEngine (the step loop on a thread of this process) and
EngineCoreClient (the step loop in a child process, outputs arriving over a pipe). It owns the
per-request queues, the outputs held back for non-streamed requests, the drain waiters, the
pending futures and the death notice. It knows nothing about how outputs are produced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from reference_server.errors import EngineDeadError, RequestValidationError
from reference_server.outputs import RequestOutput

__all__ = ["RequestStreams"]

_Stream = tuple[asyncio.AbstractEventLoop, "asyncio.Queue[RequestOutput | BaseException]"]


class RequestStreams:
    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}
        # Requests delivered once, at the end (stream=False): the pieces so far.
        self._held: dict[str, tuple[list[str], list[int]]] = {}
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
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        with self._lock:
            if request_id in self._streams:
                raise RequestValidationError("request_id", f"{request_id!r} is already in flight")
            self._streams[request_id] = (loop, queue)
            if not stream:
                self._held[request_id] = ([], [])
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
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Any], Any]]] = {}
        with self._lock:
            held = self._held
            for output in outputs:
                stream = self._streams.get(output.request_id)
                if stream is None:
                    continue
                if held and output.request_id in held:
                    output = _hold(held, output)
                    if output is None:
                        continue
                loop, queue = stream
                batches.setdefault(loop, []).append((queue, output))
        for loop, items in batches.items():
            _call_soon(loop, _put_all, items)

    def deliver(self, request_id: str, item: RequestOutput | BaseException) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is not None:
            loop, queue = stream
            _call_soon(loop, queue.put_nowait, item)

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
        for loop, queue in streams:
            _call_soon(loop, queue.put_nowait, error)
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
    held: dict[str, tuple[list[str], list[int]]], output: RequestOutput
) -> RequestOutput | None:
    """Keep a non-streamed request's pieces; at its end, one output with all of them."""
    texts, token_ids = held[output.request_id]
    texts.append(output.new_text)
    token_ids.extend(output.new_token_ids)
    if not output.finished:
        return None
    del held[output.request_id]
    return dataclasses.replace(output, new_text="".join(texts), new_token_ids=token_ids)


def _put_all(items: list[tuple[asyncio.Queue[Any], Any]]) -> None:
    for queue, item in items:
        queue.put_nowait(item)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    if asyncio._get_running_loop() is loop:
        # The producer runs on the consumer's loop (the engine core client): no hand-off.
        fn(*args)
        return
    # RuntimeError: the consumer's loop has closed; nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
