"""What a run asks the target directly: health, model, batching settings, metrics, in-flight.

Owns the small HTTP exchanges the orchestrator makes outside the observers: the start-of-run
look at the target (model from `/v1/models`, batching from `/admin/batching` where the server
has it, server kind and histogram buckets from one `/metrics` scrape, which request fields it
refuses: `gate.orchestrator.request_fields`), the health probe used to
notice a dead target, and the in-flight count (running + waiting, from `/metrics`) used to wait
for the drain. Every call has a timeout and reports failure as a value, never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from gate.errors import BatchgateError, ExitCode
from gate.observers.namemaps import (
    GLOSSARY_NAMES,
    SERVER_KINDS,
    detect_metricless_kind,
    detect_server_kind,
    map_metrics,
    unavailable_reason,
)
from gate.observers.prom_scraper import parse_exposition
from gate.orchestrator.liveness import HealthProbe
from gate.orchestrator.request_fields import FieldProbe, probe_fields

__all__ = ["TargetClient", "TargetError", "TargetInfo", "settings_hash"]


class TargetError(BatchgateError, RuntimeError):
    """The target could not be reached or answered nonsense (message says which URL, why)."""

    default_exit_code = ExitCode.NO_DATA

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code  # the HTTP status that made it unusable, if any


# A one-token answer; a busy or warming foreign server may still take a while.
_FIELD_PROBE_TIMEOUT_SECONDS = 30.0


def settings_hash(settings: dict[str, Any] | None) -> str | None:
    if settings is None:
        return None
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class TargetInfo:
    url: str
    server_kind: str
    model: str | None
    batching: dict[str, Any] | None
    bucket_bounds: dict[str, list[float]] = field(default_factory=dict)
    has_step_records: bool = False
    # False for a plain OpenAI-compatible server without /metrics (kind "openai"): client-side
    # gates are judged on it; server-side ones are not measurable.
    has_metrics: bool = True
    # glossary scrape names the server's name map cannot give ({name: why})
    unavailable: dict[str, str] = field(default_factory=dict)
    # None when the target has an OpenAI Batch API (/v1/batches), else why not.
    no_batch_api: str | None = None
    # What the start-of-run request-field check found (gate.orchestrator.request_fields):
    # the fields the load generator must leave out; None where it was not run (the bundled
    # server, which takes every one of them).
    fields: FieldProbe | None = None

    @property
    def refused_fields(self) -> tuple[str, ...]:
        return () if self.fields is None else self.fields.refused

    def to_manifest(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "server_kind": self.server_kind,
            "has_metrics": self.has_metrics,
            "has_step_records": self.has_step_records,
            "has_batch_api": self.no_batch_api is None,
            "model": self.model,
            "batching": self.batching,
            "batching_hash": settings_hash(self.batching),
            "refused_fields": list(self.refused_fields),
            "fields_check": None if self.fields is None else self.fields.note,
        }


class TargetClient:
    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        admin_token: str | None = None,
        timeout_seconds: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._api_headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._client = httpx.Client(timeout=timeout_seconds)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TargetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return self._client.get(self.url + path, headers=headers)
        except httpx.HTTPError as exc:
            raise TargetError(
                f"cannot reach {self.url}{path}: {type(exc).__name__}: {exc}"
            ) from exc

    def healthy(self) -> bool:
        """/health answers 200; on a server without /health (404), /v1/models does."""
        return self.probe_health().ok

    def probe_health(self, timeout_seconds: float = 2.0) -> HealthProbe:
        """One timed look at /health (or /v1/models where /health is 404); never raises."""
        started = time.monotonic()
        try:
            status = self._client.get(self.url + "/health", timeout=timeout_seconds).status_code
            if status == 404:
                status = self._client.get(
                    self.url + "/v1/models", headers=self._api_headers, timeout=timeout_seconds
                ).status_code
        except httpx.ConnectError as exc:  # nothing listens (refused), or the host is gone
            return HealthProbe(
                ok=False,
                refused=True,
                latency_seconds=time.monotonic() - started,
                detail=f"ConnectError: {exc}",
            )
        except httpx.HTTPError as exc:  # a timeout, a reset mid-answer: maybe only busy
            return HealthProbe(
                ok=False,
                refused=False,
                latency_seconds=time.monotonic() - started,
                detail=f"{type(exc).__name__} after {time.monotonic() - started:.1f} s",
            )
        return HealthProbe(
            ok=status == 200,
            refused=False,
            latency_seconds=time.monotonic() - started,
            detail=f"HTTP {status}",
        )

    def model(self) -> str | None:
        data = self._models().get("data") or []
        return str(data[0].get("id")) if data and isinstance(data[0], dict) else None

    def _models(self) -> dict[str, Any]:
        """The /v1/models body; raises TargetError when it is not an OpenAI model list."""
        response = self._get("/v1/models", self._api_headers)
        if response.status_code != 200:
            raise TargetError(f"{self.url}/v1/models answered HTTP {response.status_code}")
        try:
            body = response.json()
            body.get("data")
        except (ValueError, AttributeError) as exc:
            raise TargetError(f"{self.url}/v1/models is not an OpenAI model list") from exc
        return body  # type: ignore[no-any-return]

    def _post_chat(self, body: dict[str, Any]) -> tuple[int | None, str]:
        """POST one small chat request: (HTTP status, why) or (None, why) without an answer."""
        try:
            response = self._client.post(
                self.url + "/v1/chat/completions",
                json=body,
                headers=self._api_headers,
                timeout=_FIELD_PROBE_TIMEOUT_SECONDS,
            )
        except httpx.HTTPError as exc:
            return None, f"no answer to a one-token chat request: {type(exc).__name__}"
        return response.status_code, f"HTTP {response.status_code}: {response.text[:200]}"

    def check_fields(self, kind: str, model: str | None) -> FieldProbe | None:
        """Which non-standard request fields the target refuses; None on the bundled server."""
        if kind == "batchgate":
            return None
        return probe_fields(self._post_chat, model)

    def batching(self) -> dict[str, Any] | None:
        """The bundled server's live settings; None for servers without /admin/batching."""
        response = self._get("/admin/batching", self._admin_headers)
        if response.status_code != 200:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def batch_api_problem(self) -> str | None:
        """None when /v1/batches is served (any answer but 404/405/501: a 401 still means
        the API is there), else why the offline_job profile cannot run here."""
        response = self._get("/v1/batches?limit=1", self._api_headers)
        if response.status_code in (404, 405, 501):
            return f"the target has no Batch API (/v1/batches answered HTTP {response.status_code})"
        return None

    def has_step_records(self) -> bool:
        response = self._get("/admin/steps?limit=1", self._admin_headers)
        return response.status_code == 200

    def raw_samples(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """One /metrics scrape as sample name -> [(labels, value)]; raises TargetError."""
        response = self._get("/metrics", self._api_headers)
        if response.status_code != 200:
            raise TargetError(
                f"{self.url}/metrics answered HTTP {response.status_code}",
                status_code=response.status_code,
            )
        try:
            return parse_exposition(response.text)
        except (ValueError, TypeError, IndexError) as exc:
            raise TargetError(f"{self.url}/metrics is not a Prometheus exposition: {exc}") from exc

    def llamacpp_context(self) -> tuple[int, int] | None:
        """llama.cpp's (context tokens per slot, slots) from `/props`, when the target is one.

        `n_ctx` there is one slot's context (`-c` divided over `-np` slots unless the KV cache
        is unified); `total_slots` is how many share the cache."""
        try:
            response = self._get("/props", self._api_headers)
            body = response.json() if response.status_code == 200 else None
        except (TargetError, ValueError):
            return None
        if not isinstance(body, dict):
            return None
        settings = body.get("default_generation_settings")
        n_ctx = body.get("n_ctx")
        if n_ctx is None and isinstance(settings, dict):
            n_ctx = settings.get("n_ctx")
        if not (isinstance(n_ctx, (int, float)) and n_ctx > 0):
            return None
        slots = body.get("total_slots")
        return int(n_ctx), int(slots) if isinstance(slots, (int, float)) and slots > 0 else 1

    def scrape(self) -> tuple[str, dict[str, Any]]:
        """(server kind, glossary metrics) from one /metrics scrape; raises TargetError."""
        samples = self.raw_samples()
        kind = detect_server_kind(samples)
        metrics, _ = map_metrics(kind, samples)
        return kind, metrics

    def in_flight(self) -> int | None:
        """Requests running + waiting on the target now; None when it does not say."""
        try:
            _, metrics = self.scrape()
        except TargetError:
            return None
        total, seen = 0.0, False
        for name in ("num_requests_running", "num_requests_waiting"):
            value = metrics.get(name)
            if isinstance(value, dict):
                total += sum(float(v) for v in value.values())
                seen = True
            elif isinstance(value, (int, float)):
                total += float(value)
                seen = True
        return round(total) if seen else None

    def info(self) -> TargetInfo:
        """The start-of-run look at the target; raises TargetError when it is not usable.

        A target that answers /metrics with 404 is a plain OpenAI-compatible server (kind
        `openai`): usable, with every server-side metric unavailable.
        """
        has_metrics = True
        try:
            kind, metrics = self.scrape()
        except TargetError as exc:
            if exc.status_code != 404:
                raise
            # Which server it is, from its model list (Hugging Face transformers serve).
            kind, metrics, has_metrics = detect_metricless_kind(self._models()), {}, False
        model = self.model()  # raises when /v1/models is not an OpenAI model list
        bounds = {
            name: sorted(float(le) for le in value["buckets"])
            for name, value in metrics.items()
            if isinstance(value, dict) and isinstance(value.get("buckets"), dict)
        }
        return TargetInfo(
            url=self.url,
            server_kind=kind,
            model=model,
            batching=self.batching(),
            bucket_bounds=bounds,
            has_step_records=self.has_step_records(),
            has_metrics=has_metrics,
            unavailable=_unavailable(kind, has_metrics),
            no_batch_api=self.batch_api_problem(),
            fields=self.check_fields(kind, model),
        )


def _unavailable(kind: str, has_metrics: bool) -> dict[str, str]:
    if not has_metrics:
        return dict.fromkeys(GLOSSARY_NAMES, "the target serves no /metrics")
    if kind not in SERVER_KINDS:
        return {}
    found = {name: unavailable_reason(kind, name) for name in GLOSSARY_NAMES}
    return {name: why for name, why in found.items() if why is not None}
