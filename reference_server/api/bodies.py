"""Request bodies in, JSON bodies out: the size- and time-bounded body reader and the JSON
response helper shared by every handler.

Owns the 413 (over --max-body-bytes, checked from Content-Length and while reading), 408 (body
too slow) and 400 (not JSON) answers. It knows nothing about what the JSON means.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from reference_server.api.errors import APIError
from reference_server.api.server_config import ServerConfig

__all__ = ["json_response", "read_json_body"]


def json_response(body: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


async def read_json_body(request: Request, config: ServerConfig) -> Any:
    """The decoded body; 413 past max_body_bytes (checked before and while reading), 408 when
    the client is too slow, 400 when it is not JSON."""
    limit = config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)

    async def read() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        raw = await asyncio.wait_for(read(), timeout=config.body_read_timeout_seconds)
    except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
        raise APIError(408, "request body not received in time", code="timeout") from None
    if not raw:
        raise APIError.invalid("body", "is empty; send a JSON object")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise APIError.invalid("body", f"is not valid JSON ({exc})", code="invalid_json") from None


def _too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"request body is larger than {limit} bytes",
        code="request_too_large",
    )
