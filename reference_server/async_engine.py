"""The AsyncEngine: runs the Engine's step loop in its own thread and streams each request's
RequestOutputs to asyncio consumers.

It owns the loop thread, the command inbox (adds, aborts, embeds run on the engine thread between
steps), draining and crash detection; the per-request queues are RequestStreams'. It does not
know scheduling or HTTP. The idle loop sleeps on a threading.Condition: woken by new commands,
config changes, or the engine's next_wakeup_seconds (a dynamic batching window, a deadline); it
never busy-waits. The server's default front end runs the same loop in a child process instead
(reference_server/engine_core/); this one serves tests with fake runners and
`--engine-core thread`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from reference_server.config import EngineConfig
from reference_server.engine import Engine, ModelRunnerLike
from reference_server.errors import (
    EngineDeadError,
    EngineError,
)
from reference_server.front_end import EngineFrontEnd
from reference_server.outputs import (
    SNAPSHOT_INTERVAL_SECONDS,
    EngineStats,
    StepResult,
)
from reference_server.sampling_params import SamplingParams
from reference_server.tokenizer import ByteTokenizer

__all__ = ["AsyncEngine"]

logger = logging.getLogger(__name__)

# When a step found nothing to run although the engine said there was work, wait this long
# before asking again, so an inconsistency can never turn into a spinning thread.
_IDLE_GUARD_SECONDS = 0.005


class AsyncEngine(EngineFrontEnd):
    def __init__(self, config: EngineConfig, *, runner: ModelRunnerLike | None = None) -> None:
        super().__init__()
        self._engine = Engine(config, runner=runner)
        self._cond = threading.Condition()
        self._engine_lock = threading.Lock()  # held while the engine thread steps
        self._inbox: list[Callable[[], object]] = []
        self._kicked = False
        self._stopping = False
        self._dead: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._shut_down = False
        self._snapshot: EngineStats = self._engine.stats()
        self._snapshot_at = 0.0
        self._job_ids = itertools.count(1)
        self._embedding_futures: dict[int, concurrent.futures.Future[Any]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("AsyncEngine already started")
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    def shutdown(self, timeout_seconds: float = 10.0) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_seconds)
        self._streams.fail_all(EngineDeadError("the engine was shut down"))
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

    @property
    def device(self) -> str:
        return str(getattr(self._engine.runner, "device", self._engine.config.device))

    def memory_stats(self) -> dict[str, int]:
        stats = getattr(self._engine.runner, "memory_stats", None)
        return stats() if stats is not None else {}

    # -- requests --------------------------------------------------------------------------

    async def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        """Queue an embedding job on the engine: it runs a slice of at most
        max_num_batched_tokens tokens after each step. A failure of its forward pass fails this
        call only (EngineFailure); the loop keeps serving."""
        self._check_alive()
        future = self._streams.new_future()
        job_id = next(self._job_ids)
        self._embedding_futures[job_id] = future

        def add() -> None:
            try:
                self._engine.add_embedding(job_id, token_id_lists)
            except EngineError as exc:
                self._resolve_embedding(job_id, None, exc)

        self._submit(add)
        try:
            result: list[list[float]] = await asyncio.wrap_future(future)
        finally:
            self._embedding_futures.pop(job_id, None)
        return result

    # -- settings and telemetry (thread-safe; applied between steps) -----------------------

    def get_batching(self) -> dict[str, Any]:
        return self._engine.get_batching()

    async def update_batching(self, changes: dict[str, Any]) -> dict[str, Any]:
        with self._engine_lock:
            previous = self._engine.update_batching(changes)
        self._kick()
        return previous

    def stats(self) -> EngineStats:
        """The loop's latest snapshot (at most SNAPSHOT_INTERVAL_SECONDS old while it steps,
        exact once it rests): never waits for the engine lock."""
        return self._snapshot

    def steps_after(self, seq: int, limit: int = 1000) -> tuple[list[dict[str, Any]], int, int]:
        return self._engine.step_log.after(seq, limit)

    # -- the loop thread -------------------------------------------------------------------

    def _dead_reason(self) -> str | None:
        return None if self._dead is None else f"the engine loop crashed: {self._dead!r}"

    def _send_add(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
        priority: str, arrival_time: float,
    ) -> None:  # fmt: skip
        def add() -> None:
            try:
                self._engine.add_request(request_id, prompt_token_ids, params,
                                         priority=priority, arrival_time=arrival_time)  # fmt: skip
            except EngineError as exc:
                self._streams.deliver(request_id, exc)

        self._submit(add)

    def _send_abort(self, request_id: str) -> None:
        self._submit(lambda: self._engine.abort(request_id))

    def _send_abort_all(self) -> None:
        self._submit(self._engine.abort_all)

    def _send_drain_wait(self) -> None:
        self._kick()  # the loop checks the drain waiters after every step

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
                    now = time.monotonic()
                    # /metrics reads this snapshot and never waits for a step; it is exact
                    # whenever the engine rests.
                    if (now - self._snapshot_at >= SNAPSHOT_INTERVAL_SECONDS
                            or not self._engine.has_unfinished()):  # fmt: skip
                        self._snapshot, self._snapshot_at = self._engine.stats(), now
                idle_guard = not (result.record or result.outputs or commands or
                                  result.embeddings or self._engine.num_embedding_jobs)  # fmt: skip
                self._publish(result)
        except BaseException as exc:  # the loop must report any crash, whatever its type
            logger.exception("engine loop crashed")
            self._dead = exc
            self._streams.fail_all(EngineDeadError(f"the engine loop crashed: {exc!r}"), died=exc)

    def _publish(self, result: StepResult) -> None:
        self._streams.publish(result.outputs)
        for request_id, error in result.failures:
            self._streams.deliver(request_id, error)
        for job_id, vectors, error in result.embeddings:
            self._resolve_embedding(job_id, vectors, error)
        if result.record is not None:
            self._notify_listeners(result.record)
        if self._streams.has_drain_waiters and not self._engine.has_unfinished():
            self._streams.wake_drain_waiters()

    def _resolve_embedding(self, job_id: int, vectors: Any, error: BaseException | None) -> None:
        future = self._embedding_futures.get(job_id)
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(vectors)
