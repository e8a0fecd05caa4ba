"""The Batch API's running parts and their lifetime: data directory, store, runner.

Owns `BatchAPI`: building it has no side effects; `open()` (in the server's lifespan) takes the
data directory (`--data-dir`, or a new temporary one announced in the log), locks it against a
second server, opens the store on one worker thread that every SQLite call goes through, and
starts the runner; `close()` stops the runner, commits what finished and releases the lock. A
temporary directory is removed at a clean exit unless it holds unfinished jobs (then its path
is logged, to be passed as --data-dir). It knows nothing about request shapes (files.py,
batches.py) or how lines run (runner.py, lines.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reference_server.api.errors import APIError
from reference_server.api.protocol import RequestLimits
from reference_server.api.server_config import ServerConfig

from .job_stats import JobStats
from .limits import BatchLimits
from .lines import LineExecutor
from .runner import BatchRunner
from .store import BatchStore

__all__ = ["BatchAPI", "DataDirError"]

logger = logging.getLogger("reference_server.api.batch")


class DataDirError(RuntimeError):
    """The data directory cannot be used (not creatable, or locked by another server)."""


class BatchAPI:
    def __init__(
        self, *, config: ServerConfig, engine: Any, batcher: Any, metrics: Any,
        request_limits: RequestLimits, model_name: str, is_draining: Callable[[], bool],
    ) -> None:  # fmt: skip
        self.config = config
        self.limits = BatchLimits.from_config(config)
        self._engine = engine
        self._metrics = metrics
        self._is_draining = is_draining
        self.stats = JobStats()
        self._line_executor = LineExecutor(
            engine=engine, batcher=batcher, limits=request_limits, model_name=model_name,
            metrics=metrics, strict=config.strict,
        )  # fmt: skip
        self.data_dir: Path | None = None
        self._temporary = False
        self._lock_fd: int | None = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._store: BatchStore | None = None
        self._runner: BatchRunner | None = None

    # -- lifetime ---------------------------------------------------------------------------

    async def open(self) -> None:
        self.data_dir = self._take_data_dir()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batch-store")
        self._store = BatchStore(self.data_dir)
        await self.db(self._store.open)
        self._runner = BatchRunner(
            store=self._store, db=self.db, executor=self._line_executor, limits=self.limits,
            engine=self._engine, is_draining=self._is_draining, stats=self.stats,
        )  # fmt: skip
        await self._runner.start()
        if self._metrics is not None:
            self._metrics.registry.register(self.stats.collector())

    async def close(self) -> None:
        unfinished = 0
        if self._runner is not None:
            await self._runner.close()
        if self._store is not None:
            unfinished = len(await self.db(self._store.unfinished_batches))
            await self.db(self._store.close)
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None
        if self._temporary and self.data_dir is not None:
            if unfinished:
                logger.warning(
                    "%d unfinished batch job(s) kept in %s; restart with --data-dir %s to "
                    "resume them",
                    unfinished, self.data_dir, self.data_dir,
                )  # fmt: skip
            else:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def _take_data_dir(self) -> Path:
        if self.config.data_dir is None:
            path = Path(tempfile.mkdtemp(prefix="batchgate-data-"))
            self._temporary = True
            logger.info(
                "batch API data directory: %s (temporary: removed at exit unless it holds "
                "unfinished jobs; pass --data-dir to keep jobs across restarts)",
                path,
            )
        else:
            path = Path(self.config.data_dir).expanduser().resolve()
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DataDirError(f"--data-dir {path}: cannot create it: {exc}") from None
            logger.info("batch API data directory: %s", path)
        fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DataDirError(
                f"--data-dir {path} is in use by another server (its lock file is held)"
            ) from None
        self._lock_fd = fd
        return path

    # -- access for the routes --------------------------------------------------------------

    @property
    def store(self) -> BatchStore:
        if self._store is None:
            raise APIError(
                503, "the Batch API is not running", type="service_unavailable",
                code="batch_api_unavailable",
            )  # fmt: skip
        return self._store

    @property
    def runner(self) -> BatchRunner:
        if self._runner is None:
            raise APIError(
                503, "the Batch API is not running", type="service_unavailable",
                code="batch_api_unavailable",
            )  # fmt: skip
        return self._runner

    async def db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a store call on the store's own thread (calls never overlap)."""
        if self._thread is None:
            raise APIError(
                503, "the Batch API is not running", type="service_unavailable",
                code="batch_api_unavailable",
            )  # fmt: skip
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args, **kwargs))
