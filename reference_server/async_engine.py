"""The AsyncEngine: runs the Engine's step loop in its own thread and streams each request's
RequestOutputs to asyncio consumers.

It owns the loop thread, the command inbox (adds, aborts, embeds run on the engine thread between
steps), per-request asyncio queues, draining and crash detection. It does not know scheduling or
HTTP. The idle loop sleeps on a threading.Condition: woken by new commands, config changes, or the
engine's next_wakeup_seconds (a dynamic batching window, a deadline); it never busy-waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from reference_server.config import EngineConfig
from reference_server.engine import Engine, ModelRunnerLike
from reference_server.errors import (
    AdmissionError,
    EngineDeadError,
    EngineError,
    RequestValidationError,
)
from reference_server.outputs import EngineStats, RequestOutput, StepResult
from reference_server.sampling_params import SamplingParams
from reference_server.step_record import StepRecord
from reference_server.tokenizer import ByteTokenizer

__all__ = ["AsyncEngine"]

logger = logging.getLogger(__name__)

# When a step found nothing to run although the engine said there was work, wait this long
# before asking again, so an inconsistency can never turn into a spinning thread.
_IDLE_GUARD_SECONDS = 0.005

_Stream = tuple[asyncio.AbstractEventLoop, "asyncio.Queue[RequestOutput | BaseException]"]


class AsyncEngine:
    def __init__(self, config: EngineConfig, *, runner: ModelRunnerLike | None = None) -> None:
        self._engine = Engine(config, runner=runner)
        self._cond = threading.Condition()
        self._engine_lock = threading.Lock()  # held while the engine thread steps
        self._inbox: list[Callable[[], object]] = []
        self._kicked = False
        self._stopping = False
        self._draining = False
        self._dead: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._streams: dict[str, _Stream] = {}
        # Requests delivered once, at the end (generate(stream=False)): the pieces so far.
        self._held: dict[str, tuple[list[str], list[int]]] = {}
        self._streams_lock = threading.Lock()
        self._listeners: list[Callable[[StepRecord], None]] = []
        self._drain_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._pending_futures: set[concurrent.futures.Future[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("AsyncEngine already started")
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    def shutdown(self, timeout_seconds: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_seconds)
        self._fail_all(EngineDeadError("the engine was shut down"))
        self._engine.close()

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def tokenizer(self) -> ByteTokenizer:
        return self._engine.tokenizer

    @property
    def config(self) -> EngineConfig:
        return self._engine.config

    # -- requests --------------------------------------------------------------------------

    async def generate(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        priority: str = "interactive",
        stream: bool = True,
    ) -> AsyncIterator[RequestOutput]:
        """Stream `request_id`'s outputs; errors (validation, admission) raise before the first
        output. Stopping early (aclose, cancellation) aborts the request.

        stream=False yields one output, at the end, with the whole text and token ids (its
        timing fields as usual): a caller that only needs the answer (a Batch API line) then
        costs the event loop one wake-up per request instead of one per step."""
        self._check_alive()
        if self._draining:
            raise AdmissionError("draining")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        with self._streams_lock:
            if request_id in self._streams:
                raise RequestValidationError("request_id", f"{request_id!r} is already in flight")
            self._streams[request_id] = (loop, queue)
            if not stream:
                self._held[request_id] = ([], [])
        arrival = time.monotonic()

        def add() -> None:
            try:
                self._engine.add_request(
                    request_id, prompt_token_ids, params, priority=priority, arrival_time=arrival
                )
            except EngineError as exc:
                self._deliver_to(request_id, exc)

        finished = False
        try:
            self._submit(add)
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
            with self._streams_lock:
                self._streams.pop(request_id, None)
                self._held.pop(request_id, None)
            if not finished and self._dead is None:
                self._submit(lambda: self._engine.abort(request_id))

    async def abort(self, request_id: str) -> None:
        self._check_alive()
        self._submit(lambda: self._engine.abort(request_id))

    async def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        """Run the runner's embed on the engine thread between steps."""
        self._check_alive()
        future: concurrent.futures.Future[list[list[float]]] = concurrent.futures.Future()

        def run() -> None:
            self._pending_futures.discard(future)
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self._engine.embed(token_id_lists))
            except EngineError as exc:
                future.set_exception(exc)

        self._pending_futures.add(future)
        self._submit(run)
        return await asyncio.wrap_future(future)

    async def drain(self, timeout_seconds: float) -> None:
        """Refuse new requests ("draining"), wait up to `timeout_seconds` for in-flight ones,
        then abort whatever is left (its consumers get finish_reason "abort")."""
        self._draining = True
        if not self.is_alive():
            return
        if not await self._wait_drained(timeout_seconds):
            self._submit(self._engine.abort_all)
            await self._wait_drained(max(1.0, timeout_seconds))

    async def _wait_drained(self, timeout_seconds: float) -> bool:
        event = asyncio.Event()
        with self._cond:
            self._drain_waiters.append((asyncio.get_running_loop(), event))
            self._kicked = True
            self._cond.notify_all()
        try:
            await asyncio.wait_for(event.wait(), timeout_seconds)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            return False
        return True

    # -- settings and telemetry (thread-safe; applied between steps) -----------------------

    def get_batching(self) -> dict[str, Any]:
        return self._engine.get_batching()

    def update_batching(self, changes: dict[str, Any]) -> dict[str, Any]:
        with self._engine_lock:
            previous = self._engine.update_batching(changes)
        self._kick()
        return previous

    def stats(self) -> EngineStats:
        with self._engine_lock:
            return self._engine.stats()

    def steps_after(self, seq: int, limit: int = 1000) -> tuple[list[dict[str, Any]], int, int]:
        return self._engine.step_log.after(seq, limit)

    def add_step_listener(self, fn: Callable[[StepRecord], None]) -> None:
        self._listeners.append(fn)

    # -- the loop thread -------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._dead is not None:
            raise EngineDeadError(f"the engine loop crashed: {self._dead!r}")
        if not self.is_alive():
            raise EngineDeadError("the engine loop is not running")

    def _submit(self, command: Callable[[], object]) -> None:
        with self._cond:
            self._inbox.append(command)
            self._cond.notify_all()

    def _kick(self) -> None:
        with self._cond:
            self._kicked = True
            self._cond.notify_all()

    def _run(self) -> None:
        idle_guard = False
        try:
            while True:
                with self._cond:
                    while not (self._stopping or self._inbox or self._kicked):
                        with self._engine_lock:
                            wakeup = self._engine.next_wakeup_seconds()
                        if wakeup == 0.0 and not idle_guard:
                            break
                        if wakeup == 0.0:
                            wakeup = _IDLE_GUARD_SECONDS
                        idle_guard = False
                        self._cond.wait(wakeup)
                    if self._stopping:
                        return
                    commands, self._inbox = self._inbox, []
                    self._kicked = False
                with self._engine_lock:
                    for command in commands:
                        command()
                    result = self._engine.step()
                idle_guard = result.record is None and not result.outputs and not commands
                self._publish(result)
        except BaseException as exc:  # the loop must report any crash, whatever its type
            logger.exception("engine loop crashed")
            self._dead = exc
            self._fail_all(EngineDeadError(f"the engine loop crashed: {exc!r}"))

    def _publish(self, result: StepResult) -> None:
        # One wake-up per consumer loop per step, not one per output: each
        # call_soon_threadsafe writes to the loop's self-pipe, and at 64 streams that cost
        # competes with the engine for the same cores.
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue[Any], Any]]] = {}
        with self._streams_lock:
            held = self._held
            for output in result.outputs:
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
        if result.record is not None:
            for listener in self._listeners:
                try:
                    listener(result.record)
                except Exception:  # a broken observer must not stop serving
                    logger.exception("step listener failed")
        if self._drain_waiters and not self._engine.has_unfinished():
            with self._cond:
                waiters, self._drain_waiters = self._drain_waiters, []
            for loop, event in waiters:
                _call_soon(loop, event.set)

    def _deliver_to(self, request_id: str, item: RequestOutput | BaseException) -> None:
        with self._streams_lock:
            stream = self._streams.get(request_id)
        if stream is not None:
            loop, queue = stream
            _call_soon(loop, queue.put_nowait, item)

    def _fail_all(self, error: EngineDeadError) -> None:
        with self._streams_lock:
            streams = list(self._streams.values())
        for loop, queue in streams:
            _call_soon(loop, queue.put_nowait, error)
        for future in list(self._pending_futures):
            if future.set_running_or_notify_cancel():
                future.set_exception(error)
        self._pending_futures.clear()
        with self._cond:
            waiters, self._drain_waiters = self._drain_waiters, []
        for loop, event in waiters:
            _call_soon(loop, event.set)


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
    # RuntimeError: the consumer's loop has closed; nobody is listening any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
