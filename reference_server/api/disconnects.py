"""A client that leaves early is a normal event: one INFO line, never a traceback.

Owns the log line for every point a client can hang up (mid-body, while queued, mid-stream, a
stream aborted because its client stopped reading) and the Starlette handler that turns
Starlette's `ClientDisconnect` (raised by a body read) into that line and an empty response
nobody reads. The docs promise that an ERROR line means a bug; this keeps the promise. It knows
nothing about what the request was for.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["client_disconnected", "log_client_gone"]

logger = logging.getLogger("reference_server.api")


def log_client_gone(scope: Any, stage: str) -> None:
    """`scope`: the ASGI scope (or a Request); `stage`: where the client was when it left."""
    if isinstance(scope, Request):
        scope = scope.scope
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else "?"
    logger.info(
        "client %s left %s %s %s", peer, stage, scope.get("method", "?"), scope.get("path", "?")
    )


async def client_disconnected(request: Request, exc: Exception) -> Response:
    log_client_gone(request, "while sending the body of")
    return Response(status_code=204)
