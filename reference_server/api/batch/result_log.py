"""Finished lines on their way to the store: group commits.

Owns the lines finished since the last commit and the commit rhythm: a finished line waits at
most `FLUSH_INTERVAL_SECONDS` before it is committed with every other line finished meanwhile,
so a job of short lines costs one SQLite transaction (one fsync) per group, not per line. A
line lost in that window by a SIGKILL simply runs again after the restart. It knows nothing
about jobs or the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .store import LineResult

__all__ = ["FLUSH_INTERVAL_SECONDS", "ResultLog"]

FLUSH_INTERVAL_SECONDS = 0.05


class ResultLog:
    def __init__(self, commit: Callable[[list[LineResult]], Awaitable[Any]]) -> None:
        self._commit = commit
        self._pending: list[LineResult] = []
        self._lock = asyncio.Lock()
        self._wanted = asyncio.Event()

    def add(self, result: LineResult) -> None:
        self._pending.append(result)
        self._wanted.set()

    async def flush(self) -> None:
        """Commit everything added so far (waits for a commit already under way)."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if batch:
                await self._commit(batch)

    async def run(self) -> None:
        """The commit loop; cancel it to stop (then `flush()` once more)."""
        while True:
            await self._wanted.wait()
            await asyncio.sleep(FLUSH_INTERVAL_SECONDS)
            self._wanted.clear()
            await self.flush()
