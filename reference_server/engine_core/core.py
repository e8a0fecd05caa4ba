"""The engine core process: builds the Engine, then loops — read commands, step, send the step's
outputs as one message.

It owns the child's side of the pipe and the loop. Between steps it reads every command waiting
(adds, aborts, embeds, batching changes) without blocking; when the engine has nothing to run it
blocks on the pipe until a command arrives or the engine's next wake-up (a batching window, a
deadline) comes, so an idle server costs no CPU. Statistics for /metrics go out at most every
SNAPSHOT_INTERVAL_SECONDS while busy and always before the loop goes idle, so the API process
answers /metrics from a snapshot and never waits for a step.

Signals: SIGINT and SIGTERM are the API process's to handle (it drains, then sends SHUTDOWN); a
Ctrl-C in a terminal reaches the whole process group, and the core must not die of it. If the
API process dies, the pipe reaches end-of-file and the core exits.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import select
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from reference_server.config import EngineConfig
from reference_server.engine import Engine
from reference_server.engine_core import wire
from reference_server.errors import EngineError, EngineFailure
from reference_server.outputs import SNAPSHOT_INTERVAL_SECONDS

__all__ = ["run_engine_core"]

logger = logging.getLogger("reference_server.engine_core")

# As in AsyncEngine: a step that found nothing although the engine said there was work waits
# this long before asking again, so an inconsistency never becomes a spinning loop.
_IDLE_GUARD_SECONDS = 0.005


def run_engine_core(config: EngineConfig, sock: socket.socket, log_level: str) -> None:
    """The child process's entry point (multiprocessing target). `sock` is the core's end of
    the socket pair; a Connection over it speaks the API process's framing (channel.py)."""
    conn = Connection(sock.detach())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        engine = Engine(config)
    except BaseException as exc:  # the API process reports it and exits non-zero
        # A ConfigError (a limit only the model can check) goes back whole: the command line
        # names the flag and exits 2, as it does with the engine in-process.
        if not isinstance(exc, EngineError):
            logger.exception("the engine did not start")
        error = exc if isinstance(exc, EngineError) else None
        _send_quietly(conn, (wire.DEAD, f"the engine did not start: {exc!r}", error))
        raise SystemExit(1) from None
    # As the API process does once it listens: what start-up loaded (torch, the model) goes to
    # the permanent generation, so a full collection scans only what serving allocates; without
    # it a gen-2 collection stalled a step (and every stream) by 50-170 ms on this machine.
    gc.collect()
    gc.freeze()
    core = _Core(engine, conn)
    try:
        core.send((wire.READY, core.ready_info()))
        core.run()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        logger.info("the API process went away; the engine core exits")
    except BaseException as exc:
        logger.exception("engine loop crashed")
        reason = "".join(traceback.format_exception_only(exc)).strip()
        _send_quietly(conn, (wire.DEAD, reason, None))
        raise SystemExit(1) from None
    finally:
        engine.close()


class _Core:
    def __init__(self, engine: Engine, conn: Connection) -> None:
        self._engine = engine
        self._conn = conn
        self._drain_waiting = False
        self._stopping = False
        self._last_snapshot = 0.0
        # The between-steps check for commands: Connection.poll(0) builds and tears down a
        # selector on each call. Between two forward passes that made the read a median 38 us a
        # step here, against 7 us with one poll object registered once. Blocking waits (the
        # idle path) keep Connection.poll.
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)

    def send(self, message: tuple[Any, ...]) -> None:
        self._conn.send_bytes(wire.encode(message))

    def ready_info(self) -> dict[str, Any]:
        engine = self._engine
        return {
            "device": str(getattr(engine.runner, "device", engine.config.device)),
            "batching": engine.get_batching(),
            "snapshot": self._snapshot(),
        }

    def run(self) -> None:
        engine = self._engine
        idle_guard = False
        while not self._stopping:
            wakeup = engine.next_wakeup_seconds()
            timeout: float | None = 0.0
            if wakeup != 0.0 or idle_guard:
                timeout = _IDLE_GUARD_SECONDS if wakeup == 0.0 else wakeup
                self._before_idle()
            got_commands = self._read_commands(timeout)
            if self._stopping:
                return
            result = engine.step()
            idle_guard = not (result.record or result.outputs or got_commands or
                              result.embeddings or engine.num_embedding_jobs)  # fmt: skip
            if result.outputs or result.record is not None:
                now = time.monotonic()
                snapshot = None
                # With the outputs of the step after which the engine rests, so that a scrape
                # sent after the last response already sees that step (as in a thread).
                if (now - self._last_snapshot >= SNAPSHOT_INTERVAL_SECONDS
                        or not engine.has_unfinished()):  # fmt: skip
                    snapshot = self._snapshot(now)
                self.send((wire.STEP, wire.pack_outputs(result.outputs), result.record, snapshot))
            for request_id, error in result.failures:
                self.send((wire.REJECT, request_id, error))
            for job_id, vectors, error in result.embeddings:
                self.send((wire.REPLY, job_id, vectors, error))
            if self._drain_waiting and not engine.has_unfinished():
                self._drain_waiting = False
                self.send((wire.DRAINED,))

    def _before_idle(self) -> None:
        # The last word before sleeping: /metrics must show the state the engine rests in
        # (KV back to 0 after a drain), not one from mid-burst.
        self.send((wire.STATS, self._snapshot()))
        if self._drain_waiting and not self._engine.has_unfinished():
            self._drain_waiting = False
            self.send((wire.DRAINED,))

    def _read_commands(self, timeout: float | None) -> bool:
        """Apply every command waiting; block up to `timeout` (None: forever) for the first."""
        conn = self._conn
        waiting = self._poller.poll(0) if timeout == 0.0 else conn.poll(timeout)
        if not waiting:
            return False
        while True:  # a hang-up or error also reads as ready: recv_bytes then raises EOFError
            self._apply(wire.decode(conn.recv_bytes()))
            if self._stopping or not self._poller.poll(0):
                return True

    def _apply(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        engine = self._engine
        if kind == wire.ADD:
            _, request_id, prompt, params, priority, arrival = message
            try:
                engine.add_request(request_id, prompt, params, priority=priority,
                                   arrival_time=arrival)  # fmt: skip
            except EngineError as exc:
                self.send((wire.REJECT, request_id, exc))
        elif kind == wire.ABORT:
            engine.abort(message[1])
        elif kind == wire.ABORT_ALL:
            engine.abort_all()
        elif kind == wire.EMBED:
            # Queued: its slices run between steps and its REPLY goes out when the last ends.
            try:
                engine.add_embedding(message[1], message[2])
            except EngineError as exc:
                self.send((wire.REPLY, message[1], None, exc))
        elif kind == wire.UPDATE_BATCHING:
            self._call(message[1], lambda: self._update_batching(message[2]), "batching update")
        elif kind == wire.DRAIN_WAIT:
            self._drain_waiting = True
        elif kind == wire.SHUTDOWN:
            self._stopping = True
        else:
            raise ValueError(f"unknown engine core command {kind!r}")

    def _update_batching(self, changes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        previous = self._engine.update_batching(changes)
        return previous, self._engine.get_batching()

    def _call(self, call_id: int, fn: Any, what: str) -> None:
        try:
            result, error = fn(), None
        except EngineError as exc:
            result, error = None, exc
        except Exception as exc:  # one request's failure, not the engine's: keep serving
            logger.exception("%s failed", what)
            result, error = None, EngineFailure(f"{what} failed: {exc!r}")
        self.send((wire.REPLY, call_id, result, error))

    def _snapshot(self, now: float | None = None) -> dict[str, Any]:
        self._last_snapshot = time.monotonic() if now is None else now
        engine = self._engine
        memory = getattr(engine.runner, "memory_stats", None)
        return {
            "stats": engine.stats(),
            "memory": memory() if memory is not None else {},
            "num_unfinished": engine.num_unfinished(),
        }


def _send_quietly(conn: Connection, message: tuple[Any, ...]) -> None:
    with contextlib.suppress(OSError, ValueError):  # the API process is gone: nobody to tell
        conn.send_bytes(wire.encode(message))
