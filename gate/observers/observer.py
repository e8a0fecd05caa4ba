"""The common shell of every observer: a periodic thread, a flushed JSONL writer, a summary.

Owns the timing loop (fixed-rate ticks that skip, not pile up, when a tick runs late), the
bounded start/stop of the thread, the append-only JSONL file and the counters every observer
reports to the run manifest; for observers that poll one HTTP endpoint of the target, also the
client, its URL and the shutdown that closes them. It does not know what is observed:
subclasses implement `tick()`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import orjson

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "HttpPollingObserver",
    "JsonlWriter",
    "ObserverConfigError",
    "ObserverSummary",
    "PeriodicObserver",
    "check_http_poll_config",
    "config_from_mapping",
]

# A stop() never waits longer than this for the thread; a tick blocked in a syscall (an HTTP
# timeout, a hung driver call) must not hang the run that owns the observer.
DEFAULT_JOIN_TIMEOUT_SECONDS = 5.0


class ObserverConfigError(BatchgateError, ValueError):
    """An observer was configured with a bad or unknown value."""

    default_exit_code = ExitCode.USAGE


C = TypeVar("C")


def config_from_mapping(cls: type[C], mapping: Mapping[str, Any]) -> C:
    """Build a config dataclass from a mapping; unknown keys are errors naming the key."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(mapping) - names)
    if unknown:
        raise ObserverConfigError(
            f"{cls.__name__}: unknown key(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    return cls(**mapping)


def check_http_poll_config(owner: str, config: Any) -> None:
    """Validates the fields every HTTP polling config has: `target_url`, `interval_seconds` and
    `timeout_seconds`; errors start with `owner`."""
    url = config.target_url
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ObserverConfigError(
            f"{owner}: target_url must start with http:// or https://, got {url!r}"
        )
    for field in ("interval_seconds", "timeout_seconds"):
        if not getattr(config, field) > 0:
            raise ObserverConfigError(
                f"{owner}: {field} must be > 0, got {getattr(config, field)!r}"
            )


@dataclasses.dataclass
class ObserverSummary:
    """What one observer did, for the run manifest."""

    observer: str
    samples_written: int = 0
    errors: int = 0
    missed: int = 0
    last_error: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def add_note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "observer": self.observer,
            "samples_written": self.samples_written,
            "errors": self.errors,
            "missed": self.missed,
            "last_error": self.last_error,
            "notes": list(self.notes),
        }
        out.update(self.extra)
        return out


class JsonlWriter:
    """Appends one compact JSON object per line and flushes each, so a crash loses at most one.

    The file is opened lazily on the first write (or `touch()`), so an observer that never
    reaches its target leaves no empty file that a reader could mistake for "nothing happened".
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None
        self._lock = threading.Lock()

    def touch(self) -> None:
        with self._lock:
            self._open()

    def write(self, record: Mapping[str, Any]) -> None:
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        with self._lock:
            f = self._open()
            f.write(line)
            f.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - lives as long as the writer
        return self._file


class PeriodicObserver:
    """Runs `tick()` every `interval_seconds` on a daemon thread until `stop()`.

    Ticks are scheduled on a fixed grid from the start time; a tick that overruns skips the
    grid points it missed (counted in `summary.extra["late_ticks"]`) instead of bursting.
    """

    name = "observer"

    def __init__(self, *, interval_seconds: float, join_timeout_seconds: float | None = None):
        if not interval_seconds > 0:
            raise ObserverConfigError(f"{self.name}: interval must be > 0, got {interval_seconds}")
        self.interval_seconds = float(interval_seconds)
        self.join_timeout_seconds = (
            DEFAULT_JOIN_TIMEOUT_SECONDS if join_timeout_seconds is None else join_timeout_seconds
        )
        self.summary = ObserverSummary(observer=self.name)
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._late_ticks = 0

    # -- subclass hooks -------------------------------------------------------------------
    def setup(self) -> None:
        """Runs on the caller's thread in start(); may raise nothing (record problems instead)."""

    def tick(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        """Runs on the caller's thread in stop(), after the thread ended (or was abandoned)."""

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self.setup()
        self._thread = threading.Thread(
            target=self._run, name=f"batchgate-{self.name}", daemon=True
        )
        self._thread.start()

    def request_stop(self) -> None:
        """Asks the loop to end after the current tick (safe to call from tick())."""
        self._stop_event.set()

    def stop(self) -> ObserverSummary:
        self._stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout_seconds)
            if self._thread.is_alive():
                self.summary.add_note(
                    f"thread did not end within {self.join_timeout_seconds:g} s; abandoned"
                )
        self.summary.extra["late_ticks"] = self._late_ticks
        self.teardown()
        return self.summary

    def wait(self, timeout_seconds: float | None = None) -> bool:
        """Blocks until the loop ended by itself (or timeout); True when it ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout_seconds)
        return not self._thread.is_alive()

    def __enter__(self) -> PeriodicObserver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            try:
                self.tick()
            except Exception as exc:  # one bad tick must not kill the observer silently
                self.summary.errors += 1
                self.summary.last_error = f"{type(exc).__name__}: {exc}"
            next_at += self.interval_seconds
            now = time.monotonic()
            if next_at < now:
                skipped = int((now - next_at) / self.interval_seconds) + 1
                self._late_ticks += skipped
                next_at += skipped * self.interval_seconds
            self._stop_event.wait(next_at - now)


class HttpPollingObserver(PeriodicObserver):
    """A PeriodicObserver that polls one path of the target over HTTP and writes JSONL.

    Holds the client (closed in stop() only when this observer made it), the full URL, the
    writer and `_lock`, which subclasses take around every request and write: the poll thread
    and a caller's explicit fetch share the client and the file. Once stopped, `_closed` is set
    under the lock so a late explicit fetch cannot write to a closed file.
    """

    def __init__(
        self,
        *,
        target_url: str,
        path: str,
        out_path: Path,
        interval_seconds: float,
        timeout_seconds: float,
        bearer_token: str | None,
        client: httpx.Client | None,
    ) -> None:
        # stop() waits out one request that is already in flight, and a little more.
        super().__init__(
            interval_seconds=interval_seconds, join_timeout_seconds=timeout_seconds + 2.0
        )
        self._own_client = client is None
        headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else None
        self._client = client or httpx.Client(timeout=timeout_seconds, headers=headers)
        self._url = target_url.rstrip("/") + path
        self._writer = JsonlWriter(out_path)
        self._lock = threading.Lock()
        self._closed = False

    def teardown(self) -> None:
        with self._lock:
            self._closed = True
            self._writer.close()
            if self._own_client:
                self._client.close()
