"""The embeddings batcher: which /v1/embeddings inputs share one engine job, and when it goes.

Owns the queue of pending embedding inputs and the dispatch rule the seeds describe for
single-forward models (request-level dynamic batching): a batch goes when `max_batch_size`
inputs are queued, when the oldest queued input has waited `max_wait_ms`, or at once when the
queue reaches `dispatch_threshold` (adaptive dispatch; a lone input on an idle server does not
wait out the window only if the threshold is 1). One batch runs at a time through the injected
`embed_fn`. It knows nothing about HTTP or the model; the queue is bounded
(`max_pending_inputs`: beyond it `embed` raises `BatcherFullError`, which the routes answer 429).

Why batching happens in two places: this layer decides *which requests share a forward* — a
window on the wall clock across requests from many connections, the latency-for-batch-size
trade `--embedding-max-wait-ms` sets and batchgate measures. The engine's
`reference_server.embedding_jobs` decides *how a dispatched batch shares the engine with
generation*: slices under the step token budget, one after each generation step. The window
sits in the API process, in front of the engine core's process, so that a batch crosses the
pipe as one job rather than one message per request, and a full queue is refused (429) without
a round trip to the core. It could move into the engine beside the `dynamic` policy's window
for generation (the scheduler's wake-up, docs/engine.md); that is a change to the engine loop,
not made here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["BatcherClosedError", "BatcherFullError", "EmbeddingBatcher"]

EmbedFn = Callable[[list[list[int]]], Awaitable[list[list[float]]]]


class BatcherFullError(Exception):
    """The pending queue cannot take these inputs now."""

    def __init__(self, retry_after_seconds: float) -> None:
        super().__init__("embedding queue is full")
        self.retry_after_seconds = retry_after_seconds


class BatcherClosedError(Exception):
    """The batcher has been closed (server shutting down)."""


@dataclass(slots=True)
class _Pending:
    token_ids: list[int]
    future: asyncio.Future[list[float]]
    arrival_seconds: float


class EmbeddingBatcher:
    def __init__(
        self,
        *,
        embed_fn: EmbedFn,
        max_batch_size: int,
        max_wait_ms: float,
        dispatch_threshold: int | None,
        max_pending_inputs: int,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if dispatch_threshold is not None and dispatch_threshold < 1:
            raise ValueError("dispatch_threshold must be >= 1 or None")
        if max_pending_inputs < 1:
            raise ValueError("max_pending_inputs must be >= 1")
        self._embed_fn = embed_fn
        self.max_batch_size = max_batch_size
        self.max_wait_seconds = max_wait_ms / 1000.0
        self.dispatch_threshold = dispatch_threshold
        self.max_pending_inputs = max_pending_inputs
        self._on_batch = on_batch
        self._pending: deque[_Pending] = deque()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.batch_sizes: list[int] = []  # every dispatched size, for tests and benchmarks
        self._recent_batch_seconds = 0.0

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """Queue `inputs`, wait for their vectors (in order). Cancel-safe."""
        if self._closed:
            raise BatcherClosedError("embedding batcher is closed")
        if len(self._pending) + len(inputs) > self.max_pending_inputs:
            # A rough wait: the batches needed to clear the queue at the recent batch time.
            batches = len(self._pending) / self.max_batch_size + 1
            raise BatcherFullError(retry_after_seconds=batches * self._recent_batch_seconds)
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        futures = []
        for token_ids in inputs:
            future: asyncio.Future[list[float]] = loop.create_future()
            self._pending.append(_Pending(token_ids, future, now))
            futures.append(future)
        self._arrived.set()
        try:
            return list(await asyncio.gather(*futures))
        finally:
            for future in futures:
                future.cancel()  # no-op when done; drops them from the next batch otherwise

    async def close(self) -> None:
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        while self._pending:
            item = self._pending.popleft()
            if not item.future.done():
                item.future.set_exception(BatcherClosedError("embedding batcher is closed"))

    def _should_dispatch(self, now: float) -> bool:
        size = len(self._pending)
        if size >= self.max_batch_size:
            return True
        if self.dispatch_threshold is not None and size >= self.dispatch_threshold:
            return True
        return now - self._pending[0].arrival_seconds >= self.max_wait_seconds

    async def _run(self) -> None:
        while True:
            self._drop_cancelled()
            if not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            now = time.monotonic()
            if not self._should_dispatch(now):
                deadline = self._pending[0].arrival_seconds + self.max_wait_seconds
                self._arrived.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), timeout=deadline - now)
                continue
            batch = [
                self._pending.popleft() for _ in range(min(self.max_batch_size, len(self._pending)))
            ]
            await self._dispatch(batch)

    def _drop_cancelled(self) -> None:
        if any(item.future.done() for item in self._pending):
            self._pending = deque(item for item in self._pending if not item.future.done())

    async def _dispatch(self, batch: list[_Pending]) -> None:
        live = [item for item in batch if not item.future.done()]
        if not live:
            return
        self.batch_sizes.append(len(live))
        if self._on_batch is not None:
            self._on_batch(len(live))
        started = time.monotonic()
        try:
            vectors = await self._embed_fn([item.token_ids for item in live])
        except asyncio.CancelledError:
            for item in live:
                item.future.cancel()
            raise
        except Exception as exc:  # the callers get the error; the batcher keeps serving
            for item in live:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        finally:
            self._recent_batch_seconds = time.monotonic() - started
        if len(vectors) != len(live):
            error = RuntimeError(f"embed_fn returned {len(vectors)} vectors for {len(live)}")
            for item in live:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        for item, vector in zip(live, vectors, strict=True):
            if not item.future.done():
                item.future.set_result(vector)
