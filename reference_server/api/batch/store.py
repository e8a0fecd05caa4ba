"""Where Batch API state lives: SQLite for metadata and per-line results, files on disk.

Owns the data directory's layout (`batch.sqlite3`, `files/<file_id>.jsonl`), the schema, and
every read and write of it. Exactly-once rests here: a line's result is a row keyed by
(batch_id, line) inserted with INSERT OR IGNORE in the same transaction that moves the job's
counters, and output/error files are written from those rows at finalization, so a line run
twice (once before a SIGKILL, once after) still appears once. Uploads are written to a temporary
name, fsynced and renamed before their row is committed; files without a row are removed at
open. Methods are synchronous and not thread-safe: callers serialize them (one worker thread).
It knows nothing about HTTP or the engine.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["STATUSES", "TERMINAL_STATUSES", "BatchStore", "LineResult", "new_id"]

STATUSES = (
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
    "cancelled",
)  # fmt: skip
TERMINAL_STATUSES = ("failed", "completed", "expired", "cancelled")
_BATCH_COLUMNS = (
    "id", "endpoint", "input_file_id", "completion_window", "window_seconds", "metadata",
    "status", "created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
    "expired_at", "cancelling_at", "cancelled_at", "expires_at", "output_file_id",
    "error_file_id", "total", "completed", "failed", "errors", "input_tokens", "output_tokens",
)  # fmt: skip
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, filename TEXT NOT NULL,
    purpose TEXT NOT NULL, bytes INTEGER NOT NULL, num_lines INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL, completion_window TEXT NOT NULL, window_seconds REAL NOT NULL,
    metadata TEXT, status TEXT NOT NULL, created_at REAL NOT NULL, in_progress_at REAL,
    finalizing_at REAL, completed_at REAL, failed_at REAL, expired_at REAL, cancelling_at REAL,
    cancelled_at REAL, expires_at REAL NOT NULL, output_file_id TEXT, error_file_id TEXT,
    total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0, errors TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS results (
    batch_id TEXT NOT NULL, line INTEGER NOT NULL, ok INTEGER NOT NULL, record BLOB NOT NULL,
    PRIMARY KEY (batch_id, line)) WITHOUT ROWID;
"""

LineResult = tuple[str, int, bool, bytes, int, int]  # batch, line, ok, record, in, out tokens


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BatchStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files_dir = root / "files"
        self._db: sqlite3.Connection | None = None

    # -- lifetime ---------------------------------------------------------------------------

    def open(self) -> None:
        self.files_dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.root / "batch.sqlite3", check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # a commit survives power loss, not just SIGKILL
        db.executescript(_SCHEMA)
        db.commit()
        self._db = db
        known = {row["id"] for row in db.execute("SELECT id FROM files")}
        for path in self.files_dir.iterdir():
            if path.stem not in known or path.name.startswith("."):
                path.unlink(missing_ok=True)  # an upload or a finalization cut short

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("BatchStore is not open")
        return self._db

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.db:  # commits, or rolls back on an exception
            yield self.db

    # -- files ------------------------------------------------------------------------------

    def path_of(self, file_id: str) -> Path:
        return self.files_dir / f"{file_id}.jsonl"

    def upload_path(self) -> Path:
        return self.files_dir / f".upload-{uuid.uuid4().hex}"

    def add_file(
        self, tmp: Path, *, filename: str, purpose: str, num_bytes: int, num_lines: int,
        retention_seconds: float,
    ) -> dict[str, Any]:  # fmt: skip
        """Move a written, fsynced upload into place and commit its row."""
        file_id = new_id("file-")
        os.replace(tmp, self.path_of(file_id))
        _fsync_dir(self.files_dir)
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO files (id, filename, purpose, bytes, num_lines, created_at, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (file_id, filename, purpose, num_bytes, num_lines, now, now + retention_seconds),
            )
        return self.get_file(file_id) or {}

    def get_file(self, file_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM files WHERE id = ?", (file_id,)).fetchone()
        return dict(row) if row is not None else None

    def list_files(
        self, *, purpose: str | None, after: str | None, limit: int, ascending: bool
    ) -> tuple[list[dict[str, Any]], bool]:
        return self._page("files", after, limit, ascending, purpose=purpose)

    def file_user(self, file_id: str) -> str | None:
        """An unfinished batch that reads this file, if any."""
        marks = ",".join("?" * len(TERMINAL_STATUSES))
        row = self.db.execute(
            f"SELECT id FROM batches WHERE input_file_id = ? AND status NOT IN ({marks})",
            (file_id, *TERMINAL_STATUSES),
        ).fetchone()
        return row["id"] if row is not None else None

    def delete_file(self, file_id: str) -> bool:
        with self._tx() as db:
            deleted = db.execute("DELETE FROM files WHERE id = ?", (file_id,)).rowcount > 0
        self.path_of(file_id).unlink(missing_ok=True)
        return deleted

    # -- batches ----------------------------------------------------------------------------

    def add_batch(self, row: dict[str, Any]) -> dict[str, Any]:
        names = [name for name in _BATCH_COLUMNS if name in row]
        with self._tx() as db:
            db.execute(
                f"INSERT INTO batches ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [row[name] for name in names],
            )
        return self.get_batch(row["id"]) or {}

    def get_batch(self, batch_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return dict(row) if row is not None else None

    def list_batches(self, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        return self._page("batches", after, limit, ascending=False)

    def update_batch(self, batch_id: str, *, only_from: Iterable[str] = (), **values: Any) -> bool:
        """Set columns; with `only_from`, only while the status is one of those (atomic)."""
        unknown = set(values) - set(_BATCH_COLUMNS)
        if unknown:
            raise ValueError(f"unknown batch columns {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in values)
        sql = f"UPDATE batches SET {sets} WHERE id = ?"
        args: list[Any] = [*values.values(), batch_id]
        states = tuple(only_from)
        if states:
            sql += f" AND status IN ({','.join('?' * len(states))})"
            args += states
        with self._tx() as db:
            return db.execute(sql, args).rowcount > 0

    def unfinished_batches(self) -> list[dict[str, Any]]:
        marks = ",".join("?" * len(TERMINAL_STATUSES))
        rows = self.db.execute(
            f"SELECT * FROM batches WHERE status NOT IN ({marks}) ORDER BY seq",
            TERMINAL_STATUSES,
        )
        return [dict(row) for row in rows]

    def count_by_status(self) -> dict[str, int]:
        rows = self.db.execute("SELECT status, COUNT(*) AS n FROM batches GROUP BY status")
        counts = dict.fromkeys(STATUSES, 0)
        counts.update({row["status"]: row["n"] for row in rows})
        return counts

    def _page(
        self, table: str, after: str | None, limit: int, ascending: bool,
        purpose: str | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:  # fmt: skip
        where, args = [], []
        if purpose is not None:
            where.append("purpose = ?")
            args.append(purpose)
        if after is not None:
            row = self.db.execute(f"SELECT seq FROM {table} WHERE id = ?", (after,)).fetchone()
            if row is None:
                raise KeyError(after)
            where.append("seq > ?" if ascending else "seq < ?")
            args.append(row["seq"])
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        order = "ASC" if ascending else "DESC"
        rows = self.db.execute(
            f"SELECT * FROM {table} {clause} ORDER BY seq {order} LIMIT ?", (*args, limit + 1)
        ).fetchall()
        return [dict(row) for row in rows[:limit]], len(rows) > limit

    # -- per-line results -------------------------------------------------------------------

    def record_results(self, results: Iterable[LineResult]) -> int:
        """Insert results not recorded yet and move their jobs' counters; returns how many."""
        added = 0
        with self._tx() as db:
            for batch_id, line, ok, record, input_tokens, output_tokens in results:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO results (batch_id, line, ok, record) VALUES (?,?,?,?)",
                    (batch_id, line, int(ok), record),
                )
                if cursor.rowcount == 0:
                    continue  # already recorded (a re-run after a restart): counted once
                added += 1
                column = "completed" if ok else "failed"
                db.execute(
                    f"UPDATE batches SET {column} = {column} + 1, input_tokens = input_tokens + ?,"
                    " output_tokens = output_tokens + ? WHERE id = ?",
                    (input_tokens, output_tokens, batch_id),
                )
        return added

    def done_lines(self, batch_id: str) -> set[int]:
        rows = self.db.execute("SELECT line FROM results WHERE batch_id = ?", (batch_id,))
        return {row["line"] for row in rows}

    def finalize(
        self, batch_id: str, *, retention_seconds: float, **batch_values: Any
    ) -> tuple[str | None, str | None]:
        """Write the output and error files from the recorded results, in line order, then in
        one transaction commit their rows and set the job's file ids and `batch_values` (its
        final status). Returns (output_file_id, error_file_id), None for an empty one."""
        unknown = set(batch_values) - set(_BATCH_COLUMNS)
        if unknown:
            raise ValueError(f"unknown batch columns {sorted(unknown)}")
        paths = {True: self.upload_path(), False: self.upload_path()}
        counts = {True: 0, False: 0}
        sizes = {True: 0, False: 0}
        handles = {ok: open(path, "wb") for ok, path in paths.items()}  # noqa: SIM115
        try:
            rows = self.db.execute(
                "SELECT ok, record FROM results WHERE batch_id = ? ORDER BY line", (batch_id,)
            )
            for row in rows:
                ok = bool(row["ok"])
                handles[ok].write(row["record"] + b"\n")
                counts[ok] += 1
                sizes[ok] += len(row["record"]) + 1
            for handle in handles.values():
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            for handle in handles.values():
                handle.close()
        ids: dict[bool, str | None] = {True: None, False: None}
        for ok in (True, False):
            if counts[ok] == 0:
                paths[ok].unlink(missing_ok=True)
                continue
            file_id = ids[ok] = new_id("file-")
            # A crash from here to the commit leaves files without rows: open() removes them.
            os.replace(paths[ok], self.path_of(file_id))
        _fsync_dir(self.files_dir)
        now = time.time()
        with self._tx() as db:
            for ok, kind in ((True, "output"), (False, "error")):
                if ids[ok] is None:
                    continue
                db.execute(
                    "INSERT INTO files (id, filename, purpose, bytes, num_lines, created_at, "
                    "expires_at) VALUES (?, ?, 'batch_output', ?, ?, ?, ?)",
                    (ids[ok], f"{batch_id}_{kind}.jsonl", sizes[ok], counts[ok], now,
                     now + retention_seconds),
                )  # fmt: skip
            values = {"output_file_id": ids[True], "error_file_id": ids[False], **batch_values}
            sets = ", ".join(f"{name} = ?" for name in values)
            db.execute(f"UPDATE batches SET {sets} WHERE id = ?", (*values.values(), batch_id))
        return ids[True], ids[False]

    # -- retention --------------------------------------------------------------------------

    def sweep(self, now: float, retention_seconds: float) -> tuple[int, int]:
        """Delete expired files no unfinished job reads, and finished jobs past retention."""
        marks = ",".join("?" * len(TERMINAL_STATUSES))
        old = [
            row["id"]
            for row in self.db.execute(
                f"SELECT id FROM batches WHERE status IN ({marks}) AND created_at + ? < ?",
                (*TERMINAL_STATUSES, retention_seconds, now),
            )
        ]
        with self._tx() as db:
            for batch_id in old:
                db.execute("DELETE FROM results WHERE batch_id = ?", (batch_id,))
                db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))
        expired = [
            row["id"]
            for row in self.db.execute(
                "SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at < ?", (now,)
            )
        ]
        removed = 0
        for file_id in expired:
            if self.file_user(file_id) is None:
                removed += int(self.delete_file(file_id))
        return len(old), removed
