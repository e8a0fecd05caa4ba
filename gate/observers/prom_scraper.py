"""The Prometheus scraper: polls a target's /metrics and writes scrapes.jsonl (docs/records.md).

Owns fetching the exposition (a background poll at `interval_seconds`, plus `scrape_now(phase)`
for the exact `start` / `end` / `drain` scrapes around each window), parsing it with
prometheus_client's parser, detecting the server kind and recording failures as `ok: false`
records instead of raising. The name maps (gate.observers.namemaps) turn the target's names into
glossary names. It does not know about gates, windows or the meaning of any metric.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gate.observers.namemaps import SERVER_KINDS, detect_server_kind, map_metrics
from gate.observers.observer import (
    HttpPollingObserver,
    ObserverConfigError,
    check_http_poll_config,
)

__all__ = ["PHASES", "PromScraper", "ScraperConfig", "parse_exposition"]

PHASES = ("start", "poll", "end", "drain")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScraperConfig:
    target_url: str  # base URL of the server, e.g. http://127.0.0.1:8000
    out_path: Path
    interval_seconds: float = 1.0
    timeout_seconds: float = 2.0
    metrics_path: str = "/metrics"
    api_key: str | None = None  # sent as a Bearer token when the target protects /metrics
    server_kind: str | None = None  # force a kind instead of detecting it

    def __post_init__(self) -> None:
        if not isinstance(self.out_path, Path):
            object.__setattr__(self, "out_path", Path(self.out_path))
        check_http_poll_config("scraper", self)
        if self.server_kind is not None and self.server_kind not in SERVER_KINDS:
            raise ObserverConfigError(
                f"scraper: server_kind must be one of {', '.join(SERVER_KINDS)}, "
                f"got {self.server_kind!r}"
            )


def parse_exposition(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)]; raises ValueError on text that is not an exposition."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue  # creation timestamps of counters/histograms, not values
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


class PromScraper(HttpPollingObserver):
    """Polls `/metrics` in the background; `scrape_now()` adds exact phase scrapes."""

    name = "prom_scraper"

    def __init__(self, config: ScraperConfig, *, client: httpx.Client | None = None) -> None:
        super().__init__(
            target_url=config.target_url,
            path=config.metrics_path,
            out_path=config.out_path,
            interval_seconds=config.interval_seconds,
            timeout_seconds=config.timeout_seconds,
            bearer_token=config.api_key,
            client=client,
        )
        self.config = config
        self._server_kind = config.server_kind

    @property
    def server_kind(self) -> str | None:
        return self._server_kind

    def tick(self) -> None:
        self.scrape_now("poll")

    def scrape_now(self, phase: str) -> dict[str, Any]:
        """Scrapes once, writes the record and returns it; never raises for target problems."""
        if phase not in PHASES:
            raise ValueError(f"scrape phase must be one of {', '.join(PHASES)}, got {phase!r}")
        with self._lock:
            if self._closed:
                raise RuntimeError("scrape_now() after stop(): the scraper is closed")
            record = self._scrape(phase)
            self._writer.write(record)
            self.summary.samples_written += 1
            if not record["ok"]:
                self.summary.errors += 1
                self.summary.last_error = record["error"]
        return record

    def _scrape(self, phase: str) -> dict[str, Any]:
        t = time.time()
        try:
            response = self._client.get(self._url)
        except httpx.HTTPError as exc:
            return self._failed(t, phase, f"{type(exc).__name__}: {exc or 'no detail'}")
        if response.status_code != 200:
            return self._failed(t, phase, f"HTTP {response.status_code} from {self._url}")
        try:
            samples = parse_exposition(response.text)
        except (ValueError, TypeError, IndexError) as exc:
            return self._failed(t, phase, f"unparseable exposition: {exc}")
        kind = self._server_kind or detect_server_kind(samples)
        if self._server_kind is None and kind != "unknown":
            self._server_kind = kind  # detected once; a later partial scrape cannot flip it
        metrics, unavailable = map_metrics(kind, samples)
        return {
            "t": t,
            "phase": phase,
            "ok": True,
            "error": None,
            "server_kind": kind,
            "metrics": metrics,
            "unavailable": unavailable,
        }

    def _failed(self, t: float, phase: str, error: str) -> dict[str, Any]:
        return {
            "t": t,
            "phase": phase,
            "ok": False,
            "error": error,
            "server_kind": self._server_kind or "unknown",
            "metrics": {},
            "unavailable": [],
        }

    def teardown(self) -> None:
        super().teardown()
        self.summary.extra["server_kind"] = self._server_kind or "unknown"
        self.summary.extra["url"] = self._url
