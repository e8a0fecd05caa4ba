"""The /admin endpoints: step records for the gate, and live batching settings.

Owns `GET /admin/steps` (ring-buffer records after a sequence number, with the count of records
the poller missed because they were already evicted), `GET /admin/batching` and
`PUT /admin/batching` (merge a partial dict; refused with a 400 naming the field and nothing
changed, or answered with the previous and current settings - the one-step rollback lever).
Access: the admin token when configured, loopback clients otherwise (auth.check_admin). It knows
nothing about how the engine applies the settings.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_server.api.auth import check_admin
from reference_server.api.bodies import json_response, read_json_body
from reference_server.api.errors import APIError
from reference_server.errors import ConfigError

__all__ = ["MAX_STEPS_LIMIT", "routes"]

MAX_STEPS_LIMIT = 10_000


def _query_int(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise APIError.invalid(name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise APIError.invalid(name, f"must be between {low} and {high}, got {value}")
    return value


async def steps(request: Request) -> Response:
    state = request.app.state.server
    check_admin(request, state.config.admin_token)
    after = _query_int(request, "after", default=0, low=0, high=2**62)
    limit = _query_int(request, "limit", default=1000, low=1, high=MAX_STEPS_LIMIT)
    records, oldest_seq, latest_seq = state.engine.steps_after(after, limit)
    # Records after `after` but before the oldest still held were overwritten before this poll.
    missed = max(0, oldest_seq - after - 1) if oldest_seq > 0 else 0
    return json_response(
        {
            "records": records,
            "oldest_seq": oldest_seq,
            "latest_seq": latest_seq,
            "missed": missed,
        }
    )


async def batching(request: Request) -> Response:
    state = request.app.state.server
    check_admin(request, state.config.admin_token)
    engine = state.engine
    if request.method == "GET":
        return json_response(engine.get_batching())
    changes: Any = await read_json_body(request, state.config)
    if not isinstance(changes, dict):
        raise APIError.invalid("body", "must be a JSON object of batching settings")
    if not changes:
        raise APIError.invalid("body", "names no setting to change")
    try:
        previous = await engine.update_batching(changes)
    except ConfigError as exc:
        raise APIError.invalid(exc.field, exc.message, code="invalid_setting") from None
    return json_response({"previous": previous, "current": engine.get_batching()})


def routes() -> list[Route]:
    return [
        Route("/admin/steps", steps, methods=["GET"]),
        Route("/admin/batching", batching, methods=["GET", "PUT"]),
    ]
