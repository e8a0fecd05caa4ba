"""Process lifetime of the server: build the engine, bind, serve, drain on SIGTERM, exit 0.

Owns the uvicorn server (a subclass whose signal handling drains instead of stopping at once),
the listening socket (port 0 picks a free port; --port-file receives the bound port once the
server is listening), the engine's start and shutdown, and logging setup. SIGTERM (or a first
Ctrl-C): stop admitting (new requests get 503, /health 503), let in-flight requests finish for up
to --drain-timeout-seconds, abort the rest, close, exit 0. A second signal forces the exit. The
engine runs in a child process (EngineCoreClient; --engine-core thread keeps it in this one); if
it dies, every request in flight gets its error, /health turns 503 and the server exits 1 once
the responses are flushed. It knows nothing about individual endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from types import FrameType
from typing import Any

import uvicorn

from reference_server.api.app import ServerState, build_app, build_state
from reference_server.api.connections import raise_open_file_limit, uvicorn_options
from reference_server.api.server_config import ServerConfig
from reference_server.async_engine import AsyncEngine
from reference_server.config import EngineConfig
from reference_server.engine_core import EngineCoreClient
from reference_server.errors import EngineDeadError

__all__ = ["DrainingServer", "bind_socket", "run_server", "write_port_file"]

logger = logging.getLogger("reference_server.api")
# After the engine has drained, responses still need a moment to be flushed to clients.
_FLUSH_WAIT_SECONDS = 2.0


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def write_port_file(path: str, port: int) -> None:
    """Atomically: a poller never reads a half-written number."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".port-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(f"{port}\n")
    os.replace(tmp, path)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, state: ServerState, port: int) -> None:
        super().__init__(config)
        self._state = state
        self._port = port
        self._drain_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.engine_error: BaseException | None = None
        self._death_task: asyncio.Future[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit:
            # Everything loaded at start (torch, the model, tokenizer, uvicorn) goes to the
            # permanent generation: a full collection then scans only what serving allocates.
            # Without this a gen-2 collection took 50-170 ms here, stalling the engine and
            # every stream at once (chat TTFT p99 spikes during a Batch API job).
            gc.collect()
            gc.freeze()
            config = self._state.config
            logger.info("listening on http://%s:%d", config.host, self._port)
            if config.port_file:
                write_port_file(config.port_file, self._port)

    def engine_died(self, error: BaseException) -> None:
        """The engine is gone (any thread may call this): every request in flight has its
        error already; give the responses a moment to reach their clients, then exit
        non-zero. A server whose engine is dead must not linger half alive."""
        self.engine_error = error
        if self._loop is None:
            self.should_exit = True
            return
        self._loop.call_soon_threadsafe(self._exit_after_flush)

    def _exit_after_flush(self) -> None:
        async def flush_then_exit() -> None:
            deadline = time.monotonic() + _FLUSH_WAIT_SECONDS
            while self._state.num_in_flight > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            self.should_exit = True

        self._death_task = asyncio.ensure_future(flush_then_exit())

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not recorded in _captured_signals: uvicorn would re-raise it after shutdown and the
        # process would die by the signal instead of exiting 0 after a clean drain.
        if self._drain_task is not None or self._loop is None:
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True
            return
        # Only schedule here: a signal handler must not take locks (logging's) the interrupted
        # code may hold.
        self._loop.call_soon_threadsafe(self._start_drain, sig)

    def _start_drain(self, sig: int) -> None:
        if self._drain_task is None:
            timeout = self._state.config.drain_timeout_seconds
            logger.info("signal %d: draining (timeout %.1f s)", sig, timeout)
            self._drain_task = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        state = self._state
        state.draining = True
        try:
            await state.engine.drain(state.config.drain_timeout_seconds)
            deadline = time.monotonic() + _FLUSH_WAIT_SECONDS
            while state.num_in_flight > 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        except Exception:
            logger.exception("drain failed; shutting down anyway")
        finally:
            logger.info("drained; %d request(s) still open", state.num_in_flight)
            self.should_exit = True


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run_server(engine_config: EngineConfig, server_config: ServerConfig) -> int:
    _configure_logging(server_config.log_level)
    warning = raise_open_file_limit(server_config)
    if warning is not None:
        logger.warning("%s", warning)
    try:
        sock = bind_socket(server_config.host, server_config.port)
    except OSError as exc:
        print(
            f"error: cannot listen on {server_config.host}:{server_config.port}: {exc}",
            file=sys.stderr,
        )
        return 2
    port = sock.getsockname()[1]
    started = time.monotonic()
    try:
        engine = _start_engine(engine_config, server_config)
    except EngineDeadError as exc:
        sock.close()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state = build_state(engine, server_config, memory_fn=engine.memory_stats, device=engine.device)
    engine.add_step_listener(state.metrics.observe_step)
    if server_config.engine_core == "thread":
        engine.start()
    logger.info(
        "engine up in %.2f s: model=%s device=%s policy=%s",
        time.monotonic() - started,
        state.model_name,
        engine.device,
        engine_config.batching.policy,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            if state.batch_api is not None:
                await state.batch_api.open()  # resumes unfinished batch jobs
            yield
        finally:
            if state.batch_api is not None:
                # After the drain: lines still running are aborted and rerun next start.
                await state.batch_api.close()
            await state.batcher.close()
            engine.shutdown()

    app = build_app(state, lifespan=lifespan)
    config = uvicorn.Config(
        app,
        # parser, connection limits (refusals counted in /metrics), proxy trust
        **uvicorn_options(server_config, on_refusal=state.metrics.count_rejection),
        timeout_graceful_shutdown=5,
        lifespan="on",
        log_config=None,
    )
    server = DrainingServer(config, state=state, port=port)
    engine.on_death(server.engine_died)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        engine.shutdown()
    if server.engine_error is not None:
        logger.error("exiting: the engine died (%s)", server.engine_error)
        return 1
    return 0


def _start_engine(engine_config: EngineConfig, server_config: ServerConfig) -> Any:
    """The engine front end the server runs on: the core in a child process (started here,
    the model loaded when this returns) or, with --engine-core thread, an AsyncEngine whose
    loop thread the caller starts."""
    if server_config.engine_core == "thread":
        return AsyncEngine(engine_config)
    client = EngineCoreClient(engine_config, log_level=server_config.log_level)
    client.start()
    return client
