"""The step fetcher: copies the bundled server's step records into steps.jsonl exactly once.

Owns polling `GET /admin/steps?after=N` (response `{"records", "oldest_seq", "latest_seq",
"missed"}`), the cursor that makes every record land once, counting the records the server's
ring buffer dropped between polls (gaps in `seq`), and telling the run when the target has no
such endpoint (404: step gates then use histogram estimates). It does not interpret records.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx

from gate.observers.observer import HttpPollingObserver, check_http_poll_config

__all__ = ["StepFetcher", "StepFetcherConfig"]

MAX_PAGES_PER_FETCH = 50


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepFetcherConfig:
    target_url: str
    out_path: Path
    interval_seconds: float = 0.5
    timeout_seconds: float = 2.0
    admin_token: str | None = None
    # True: records already in the ring buffer when fetching starts belong to an earlier
    # window and are skipped; only steps from now on are written.
    from_now: bool = True
    steps_path: str = "/admin/steps"

    def __post_init__(self) -> None:
        if not isinstance(self.out_path, Path):
            object.__setattr__(self, "out_path", Path(self.out_path))
        check_http_poll_config("step fetcher", self)


class StepFetcher(HttpPollingObserver):
    """Polls /admin/steps and appends each new record (plus `t` = its wall time) once."""

    name = "step_fetcher"

    def __init__(self, config: StepFetcherConfig, *, client: httpx.Client | None = None) -> None:
        super().__init__(
            target_url=config.target_url,
            path=config.steps_path,
            out_path=config.out_path,
            interval_seconds=config.interval_seconds,
            timeout_seconds=config.timeout_seconds,
            bearer_token=config.admin_token,
            client=client,
        )
        self.config = config
        self._cursor: int | None = None  # highest seq written (or skipped by from_now)
        self._synced = False
        self.available: bool | None = None  # None until the target answered once
        self.unavailable_reason: str | None = None
        self._malformed = 0

    def tick(self) -> None:
        self.fetch_now()
        if self.available is False:
            self.request_stop()  # 404 / 401 will not change during a run

    def fetch_now(self) -> int:
        """Fetches until caught up; returns how many records were written. Never raises for
        target problems."""
        with self._lock:
            written = 0
            # The server answers at most a page (its `limit`) per request; a burst of steps
            # between two polls needs several pages, bounded so a runaway server cannot pin us.
            for _ in range(MAX_PAGES_PER_FETCH):
                if self._closed or self.available is False:
                    break
                page, more = self._fetch()
                written += page
                if not more:
                    break
            return written

    def _fetch(self) -> tuple[int, bool]:
        """One request: (records written, whether the server holds more after them)."""
        params = {"after": self._cursor} if self._cursor is not None else None
        try:
            response = self._client.get(self._url, params=params)
        except httpx.HTTPError as exc:
            self._error(f"{type(exc).__name__}: {exc or 'no detail'}")
            return 0, False
        if response.status_code == 404:
            self._unavailable(
                f"target has no {self.config.steps_path} (HTTP 404); step gates fall back to "
                "histogram estimates"
            )
            return 0, False
        if response.status_code in (401, 403):
            self._unavailable(
                f"{self.config.steps_path} refused (HTTP {response.status_code}); pass the "
                "server's admin token"
            )
            return 0, False
        if response.status_code != 200:
            self._error(f"HTTP {response.status_code} from {self._url}")
            return 0, False
        try:
            body = response.json()
            records = body["records"]
            if not isinstance(records, list):
                raise TypeError("records is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            self._error(f"unexpected response from {self._url}: {exc}")
            return 0, False
        if self.available is None:
            self.available = True
            self._writer.touch()  # an empty file says "supported, no steps"; absence says 404
        first_sync = not self._synced
        self._synced = True
        if first_sync and self.config.from_now:
            latest = body.get("latest_seq")
            seqs = [
                r["seq"] for r in records if isinstance(r, dict) and isinstance(r.get("seq"), int)
            ]
            if isinstance(latest, int):
                self._cursor = latest
            elif seqs:
                self._cursor = max(seqs)
            return 0, False
        written = self._append(records)
        latest = body.get("latest_seq")
        more = bool(records) and isinstance(latest, int) and (self._cursor or 0) < latest
        return written, more

    def _append(self, records: list[Any]) -> int:
        valid = []
        for rec in records:
            if not isinstance(rec, dict) or not isinstance(rec.get("seq"), int):
                self._malformed += 1
                continue
            if self._cursor is not None and rec["seq"] <= self._cursor:
                continue  # already written: the server may resend around `after`
            valid.append(rec)
        valid.sort(key=lambda r: r["seq"])
        written = 0
        for rec in valid:
            seq = rec["seq"]
            if self._cursor is not None and seq > self._cursor + 1:
                self.summary.missed += seq - self._cursor - 1
            wall = rec.get("wall_time", rec.get("t"))
            if not isinstance(wall, (int, float)):
                self._malformed += 1
                self._cursor = seq
                continue
            out = dict(rec)
            out["t"] = float(wall)
            self._writer.write(out)
            written += 1
            self._cursor = seq
        self.summary.samples_written += written
        return written

    def _error(self, message: str) -> None:
        self.summary.errors += 1
        self.summary.last_error = message

    def _unavailable(self, reason: str) -> None:
        self.available = False
        self.unavailable_reason = reason
        self.summary.add_note(reason)

    def teardown(self) -> None:
        super().teardown()
        self.summary.extra.update(
            {
                "available": self.available,
                "unavailable_reason": self.unavailable_reason,
                "last_seq": self._cursor,
                "malformed": self._malformed,
            }
        )
