"""The engine's small exception tree.

It owns the error types and their fields only; the HTTP layer maps them to status codes
(RequestValidationError -> 400, AdmissionError -> 429/503, EngineDeadError -> 503).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdmissionError",
    "ConfigError",
    "EngineDeadError",
    "EngineError",
    "EngineFailure",
    "RequestValidationError",
]


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigError(EngineError):
    """A configuration value is invalid; `field` is its dotted name (e.g. "batching.policy")."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross the engine-core process boundary pickled; the default reduce would call
        # __init__ with the formatted message alone.
        return (type(self), (self.field, self.message))

    def with_prefix(self, prefix: str) -> ConfigError:
        """The same error, its field name nested under `prefix`."""
        if self.field == "<root>":
            return ConfigError(prefix, self.message)
        return ConfigError(f"{prefix}.{self.field}", self.message)


class RequestValidationError(EngineError):
    """A request is malformed or exceeds a server limit; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.message))


class AdmissionError(EngineError):
    """A valid request was refused for now (`reason`: "queue_full", "draining", ...)."""

    def __init__(self, reason: str, *, retry_after_seconds: float | None = None) -> None:
        detail = f" (retry after {retry_after_seconds:.2f} s)" if retry_after_seconds else ""
        super().__init__(f"request not admitted: {reason}{detail}")
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds

    def __reduce__(self) -> tuple[Any, ...]:
        return (_admission_error, (self.reason, self.retry_after_seconds))


class EngineDeadError(EngineError):
    """The engine's step loop has stopped (crashed or shut down); no request can progress."""


class EngineFailure(EngineError):
    """One request's work failed inside the engine (an exception in its forward pass); the
    engine itself keeps serving. The HTTP layer answers it with a 500-class error."""


def _admission_error(reason: str, retry_after_seconds: float | None) -> AdmissionError:
    return AdmissionError(reason, retry_after_seconds=retry_after_seconds)
