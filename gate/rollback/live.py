"""Rollback: apply a named batching preset to a live server.

Owns the HTTP exchange with the bundled server's `GET`/`PUT /admin/batching` (snapshot the
current settings, apply the preset, return what was there before so rolling forward is one
command) and the errors a user can act on (unreachable, refused, rejected, not supported). The
mapping of presets to other servers' settings is `gate.rollback.equivalents`. It does not parse
gates files (gate.gates.file does) or print.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import httpx

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "AdminRefused",
    "ApplyResult",
    "BatchingNotSupported",
    "PresetRejected",
    "RollbackError",
    "TargetUnreachable",
    "apply_preset",
]

BATCHING_PATH = "/admin/batching"


class RollbackError(BatchgateError):
    """A rollback that could not be done; the message says why and what to do."""

    default_exit_code = ExitCode.NO_DATA


class TargetUnreachable(RollbackError):
    pass


class AdminRefused(RollbackError):
    """401/403 from the admin endpoint."""


class PresetRejected(RollbackError):
    """The server validated the preset and refused it (400); nothing changed."""


class BatchingNotSupported(RollbackError):
    """The target has no /admin/batching (404): not the bundled server."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApplyResult:
    previous: dict[str, Any]  # the settings before the change: PUT these to roll forward
    current: dict[str, Any] | None  # the settings after, when the server says


def apply_preset(
    target_url: str,
    preset: Mapping[str, Any],
    *,
    admin_token: str | None = None,
    timeout_seconds: float = 5.0,
    client: httpx.Client | None = None,
) -> ApplyResult:
    """PUTs `preset` (a full or partial batching settings object) to the target."""
    if not isinstance(preset, Mapping) or not preset:
        raise PresetRejected("preset must be a non-empty mapping of batching settings")
    url = target_url.rstrip("/") + BATCHING_PATH
    headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
    own = client is None
    http = client or httpx.Client(timeout=timeout_seconds)
    try:
        # Snapshot first: the PUT's answer carries the previous settings too, but a server that
        # answers only with the new ones must not leave us without a way back.
        before = _json(_send(http, "GET", url, headers=headers), url)
        response = _send(http, "PUT", url, headers=headers, json=dict(preset))
        body = _json(response, url)
    finally:
        if own:
            http.close()
    previous = body.get("previous") if isinstance(body.get("previous"), dict) else None
    current = body.get("current") if isinstance(body.get("current"), dict) else None
    return ApplyResult(previous=previous or _settings(before), current=current)


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    inner = body.get("settings") if isinstance(body.get("settings"), dict) else None
    return inner or body


def _send(http: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
    try:
        response = http.request(method, url, **kw)
    except httpx.HTTPError as exc:
        raise TargetUnreachable(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
    if response.status_code == 404:
        raise BatchingNotSupported(f"{url} answered 404: the target has no {BATCHING_PATH}")
    if response.status_code in (401, 403):
        raise AdminRefused(
            f"{url} refused the request (HTTP {response.status_code}); pass the server's admin "
            "token with --admin-token or BATCHGATE_ADMIN_TOKEN"
        )
    if response.status_code == 400:
        raise PresetRejected(
            f"the server refused the preset, nothing changed: {_error_text(response)}"
        )
    if response.status_code >= 300:
        raise RollbackError(
            f"{method} {url} answered HTTP {response.status_code}: {_error_text(response)}"
        )
    return response


def _json(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise RollbackError(f"{url} did not answer JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RollbackError(f"{url} answered {type(body).__name__}, expected an object")
    return body


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = body["error"]
            param = f" (field {err['param']})" if err.get("param") else ""
            return f"{err.get('message', body)}{param}"
        return str(body)
    except ValueError:
        return response.text[:300] or "(empty body)"
