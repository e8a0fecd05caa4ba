"""HTTP error values in OpenAI's JSON shape, and the mapping from engine errors to them.

Owns `APIError` (status, type, message, param, code, extra headers) and its JSON body
`{"error": {"message", "type", "param", "code"}}`. It knows the engine's exception tree only to
translate it; it knows nothing about routes or the request being served.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
from starlette.responses import Response

from reference_server.errors import (
    AdmissionError,
    ConfigError,
    EngineDeadError,
    EngineError,
    EngineFailure,
    RequestValidationError,
)

__all__ = ["APIError", "error_response", "from_engine_error"]


class APIError(Exception):
    """An error answer: raised anywhere in a handler, rendered once by the app."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    @classmethod
    def invalid(cls, param: str, message: str, *, code: str = "invalid_value") -> APIError:
        """400 naming the offending field; the message starts with the field too."""
        return cls(400, f"{param}: {message}", param=param, code=code)


def error_response(error: APIError) -> Response:
    return Response(
        orjson.dumps(error.to_dict()),
        status_code=error.status_code,
        media_type="application/json",
        headers=error.headers,
    )


def retry_after_header(seconds: float | None) -> dict[str, str]:
    # Retry-After takes whole seconds; round up so a client never retries too early.
    value = 1 if seconds is None or not math.isfinite(seconds) else max(1, math.ceil(seconds))
    return {"Retry-After": str(value)}


def from_engine_error(exc: EngineError) -> APIError:
    """The one place engine exceptions become HTTP statuses."""
    if isinstance(exc, RequestValidationError):
        field = getattr(exc, "field", None) or "request"
        message = getattr(exc, "message", None) or str(exc)
        return APIError.invalid(field, message)
    if isinstance(exc, AdmissionError):
        reason = getattr(exc, "reason", "rejected")
        retry = retry_after_header(getattr(exc, "retry_after_seconds", None))
        if reason == "draining":
            return APIError(
                503,
                "server is draining (shutting down); retry on another replica",
                type="service_unavailable",
                code="draining",
                headers=retry,
            )
        return APIError(
            429,
            f"request rejected: {reason}; retry later",
            type="rate_limit_exceeded",
            code=reason,
            headers=retry,
        )
    if isinstance(exc, EngineDeadError):
        return APIError(
            503, f"engine is not running: {exc}", type="service_unavailable", code="engine_dead"
        )
    if isinstance(exc, EngineFailure):
        return APIError(500, f"the engine failed on this request: {exc}", type="server_error",
                        code="engine_failure")  # fmt: skip
    if isinstance(exc, ConfigError):
        field = getattr(exc, "field", None) or "config"
        return APIError.invalid(field, getattr(exc, "message", None) or str(exc))
    return APIError(503, f"engine error: {exc}", type="service_unavailable", code="engine_error")
