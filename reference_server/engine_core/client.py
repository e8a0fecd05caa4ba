"""EngineCoreClient: the API process's handle on the engine core process, with AsyncEngine's
interface (generate, abort, embed, drain, get/update_batching, stats, steps_after, listeners).

It owns the child process and its socket (a CoreChannel the event loop itself reads and writes:
no helper threads). Each STEP message becomes queue puts for the consumers (RequestStreams),
feeds the step listeners and the local step-record ring behind /admin/steps, and refreshes the
statistics snapshot that stats() and memory_stats() return without asking the core. When the
core dies (end-of-file, or a DEAD message), every request in flight gets EngineDeadError,
is_alive() turns false at once, and the death handlers run (the server exits non-zero).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import socket
from typing import Any

from reference_server.config import EngineConfig
from reference_server.engine_core import wire
from reference_server.engine_core.channel import CoreChannel
from reference_server.errors import ConfigError, EngineDeadError
from reference_server.front_end import EngineFrontEnd
from reference_server.outputs import EngineStats
from reference_server.sampling_params import SamplingParams
from reference_server.step_record import StepLog
from reference_server.tokenizer import ByteTokenizer

__all__ = ["EngineCoreClient"]

logger = logging.getLogger("reference_server.engine_core")

# After SHUTDOWN, how long the core gets to close its files before it is terminated.
_EXIT_WAIT_SECONDS = 5.0


class EngineCoreClient(EngineFrontEnd):
    def __init__(self, config: EngineConfig, *, log_level: str = "info") -> None:
        super().__init__()
        self._config = config
        self._log_level = log_level
        self._tokenizer = ByteTokenizer()
        self._step_log = StepLog(max_records=config.step_log_size)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._channel: CoreChannel | None = None
        self._call_ids = itertools.count(1)
        self._calls: dict[int, Any] = {}
        self._batching: dict[str, Any] = {}
        self._device = config.device
        self._snapshot: dict[str, Any] = {"stats": EngineStats(), "memory": {}, "num_unfinished": 0}
        self._dead: str | None = None
        self._closing = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout_seconds: float | None = None) -> None:
        """Start the core and wait until its engine is built (the model loaded). Raises
        EngineDeadError with the core's own reason if it does not come up."""
        if self._process is not None:
            raise RuntimeError("EngineCoreClient already started")
        from reference_server.engine_core.core import run_engine_core

        # spawn, not fork: the API process has threads (and maybe CUDA) that a fork would copy
        # in an undefined state.
        context = multiprocessing.get_context("spawn")
        parent_sock, child_sock = socket.socketpair()
        process = context.Process(
            target=run_engine_core,
            args=(self._config, child_sock, self._log_level),
            name="engine-core",
            daemon=True,
        )
        process.start()
        child_sock.close()  # else the socket never reaches end-of-file when the core dies
        self._process = process
        self._channel = channel = CoreChannel(parent_sock)
        try:
            message = self._await_ready(timeout_seconds)
        except BaseException:
            channel.close()
            raise
        info = message[1]
        self._device = info["device"]
        self._batching = info["batching"]
        self._snapshot = info["snapshot"]

    def _await_ready(self, timeout_seconds: float | None) -> tuple[Any, ...]:
        process, channel = self._process, self._channel
        assert process is not None and channel is not None
        try:
            data = channel.read_frame_blocking(timeout_seconds)
        except (EOFError, OSError):
            process.join(_EXIT_WAIT_SECONDS)
            raise EngineDeadError(
                f"the engine core exited during start-up (exit code {process.exitcode})"
            ) from None
        if data is None:
            self._kill()
            raise EngineDeadError(f"the engine core did not start within {timeout_seconds} s")
        message = wire.decode(data)
        if message[0] != wire.READY:
            process.join(_EXIT_WAIT_SECONDS)
            if message[0] == wire.DEAD and isinstance(message[2], ConfigError):
                raise message[2]
            raise EngineDeadError(str(message[1]) if len(message) > 1 else repr(message))
        return message

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def is_alive(self) -> bool:
        self._attach()  # /health is often the first thing a fresh loop calls
        return self._process is not None and self._dead is None and self._process.is_alive()

    def shutdown(self, timeout_seconds: float = 10.0) -> None:
        if self._process is None or self._closing:
            return
        self._closing = True
        channel = self._channel
        assert channel is not None
        if self._dead is None:
            with contextlib.suppress(OSError):
                channel.send(wire.encode((wire.SHUTDOWN,)))
                channel.flush_blocking()  # the join below would keep the loop from writing it
        self._process.join(min(timeout_seconds, _EXIT_WAIT_SECONDS))
        if self._process.is_alive():
            logger.warning("the engine core did not exit after shutdown; terminating it")
            self._kill()
        self._streams.fail_all(EngineDeadError("the engine was shut down"))
        channel.close()

    @property
    def tokenizer(self) -> ByteTokenizer:
        return self._tokenizer

    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def device(self) -> str:
        return self._device

    def memory_stats(self) -> dict[str, int]:
        return dict(self._snapshot["memory"])

    # -- requests --------------------------------------------------------------------------

    async def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        result: list[list[float]] = await self._call(wire.EMBED, token_id_lists)
        return result

    # -- settings and telemetry ------------------------------------------------------------

    def get_batching(self) -> dict[str, Any]:
        return self._batching

    async def update_batching(self, changes: dict[str, Any]) -> dict[str, Any]:
        previous, current = await self._call(wire.UPDATE_BATCHING, changes)
        self._batching = current
        return previous  # type: ignore[no-any-return]

    def stats(self) -> EngineStats:
        """The core's latest snapshot (at most SNAPSHOT_INTERVAL_SECONDS old while it steps,
        exact once it is idle): /metrics never waits for a step."""
        self._attach()
        stats: EngineStats = self._snapshot["stats"]
        return stats

    def steps_after(self, seq: int, limit: int = 1000) -> tuple[list[dict[str, Any]], int, int]:
        return self._step_log.after(seq, limit)

    # -- plumbing --------------------------------------------------------------------------

    def _dead_reason(self) -> str | None:
        return None if self._dead is None else f"the engine core died: {self._dead}"

    def _send_add(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
        priority: str, arrival_time: float,
    ) -> None:  # fmt: skip
        self._post((wire.ADD, request_id, prompt_token_ids, params, priority, arrival_time))

    def _send_abort(self, request_id: str) -> None:
        self._post((wire.ABORT, request_id))

    def _send_abort_all(self) -> None:
        self._post((wire.ABORT_ALL,))

    def _send_drain_wait(self) -> None:
        self._post((wire.DRAIN_WAIT,))

    async def _call(self, kind: str, argument: Any) -> Any:
        self._check_alive()
        future = self._streams.new_future()
        call_id = next(self._call_ids)
        self._calls[call_id] = future
        self._post((kind, call_id, argument))
        try:
            return await asyncio.wrap_future(future)
        finally:
            self._calls.pop(call_id, None)

    def _post(self, message: tuple[Any, ...]) -> None:
        self._attach()
        # OSError: the core is gone; the reader reports it and _check_alive refuses new work.
        assert self._channel is not None
        with contextlib.suppress(OSError):
            self._channel.send(wire.encode(message))

    def _attach(self) -> None:
        """Have the running event loop (if any) read the core's messages."""
        if self._channel is None or self._closing:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._channel.attach(self._on_frame, self._on_eof)

    def _on_frame(self, data: bytes) -> None:
        if self._dead is not None:
            return
        try:
            message = wire.decode(data)
            if message[0] == wire.DEAD:
                self._died(str(message[1]))
                return
            self._dispatch(message)
        except Exception as exc:  # a message this process cannot read: fail closed
            logger.exception("engine core message could not be read")
            self._died(f"unreadable engine core message: {exc!r}")

    def _on_eof(self) -> None:
        if not self._closing and self._dead is None:
            self._died("the engine core exited")

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == wire.STEP:
            _, packed, record, snapshot = message
            if snapshot is not None:
                self._snapshot = snapshot
            self._streams.publish(wire.unpack_outputs(packed))
            if record is not None:
                self._step_log.append(record)
                self._notify_listeners(record)
        elif kind == wire.STATS:
            self._snapshot = message[1]
        elif kind == wire.REJECT:
            self._streams.deliver(message[1], message[2])
        elif kind == wire.REPLY:
            _, call_id, result, error = message
            future = self._calls.get(call_id)
            if future is not None and not future.done():
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(result)
        elif kind == wire.DRAINED:
            self._streams.wake_drain_waiters()
        else:
            logger.warning("unknown engine core message %r ignored", kind)

    def _died(self, reason: str) -> None:
        self._dead = reason  # first: /health turns 503 now, not after the join below
        process = self._process
        if process is not None:
            # Short: this runs on the event loop. After a kill the process is gone already.
            process.join(0.5)
            code = process.exitcode
            if code is not None and code < 0:
                reason = f"{reason} (killed by signal {-code})"
            elif code:
                reason = f"{reason} (exit code {code})"
            self._dead = reason
        logger.error("engine core died: %s", reason)
        error = EngineDeadError(f"the engine core died: {reason}")
        self._streams.fail_all(error, died=error)

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(_EXIT_WAIT_SECONDS)
