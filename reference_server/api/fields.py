"""Typed reads of one JSON request body, each failure a 400 that names the field.

Owns `BodyReader`: it pulls fields out of a decoded JSON object with exact type and range checks
(a bool is not an int, 5.0 is not an integer, NaN is not a number) and remembers which keys it
read so unknown ones can be refused. It knows nothing about which fields an endpoint has.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from reference_server.api.errors import APIError
from reference_server.config import integer_problem

__all__ = ["BodyReader", "UnknownFields", "is_token_id", "type_name"]

_MISSING = object()


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class BodyReader:
    """Reads fields of a JSON object; `None` (JSON null) counts as absent, as OpenAI treats it."""

    def __init__(self, body: Any, *, where: str = "") -> None:
        if not isinstance(body, dict):
            name = where or "body"
            raise APIError.invalid(name, f"must be a JSON object, got {type_name(body)}")
        self._body = body
        self._where = where

    def path(self, name: str) -> str:
        return f"{self._where}.{name}" if self._where else name

    def raw(self, name: str) -> Any:
        return self._body.get(name)

    def has(self, name: str) -> bool:
        return self._body.get(name) is not None

    def unknown(self, known: Iterable[str]) -> list[str]:
        """Paths of the keys not in `known`, sorted."""
        return [self.path(name) for name in sorted(set(self._body) - set(known))]

    def refuse_unknown(self, known: Iterable[str]) -> None:
        unknown = self.unknown(known)
        if unknown:
            raise APIError.invalid(
                unknown[0], "unrecognized request argument", code="unknown_parameter"
            )

    def integer(
        self, name: str, *, low: int | None = None, high: int | None = None, default: Any = None
    ) -> Any:
        value = self._body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise APIError.invalid(self.path(name), integer_problem(value, type_name(value)))
        _check_range(self.path(name), value, low, high)
        return value

    def number(
        self, name: str, *, low: float | None = None, high: float | None = None, default: Any = None
    ) -> Any:
        value = self._body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise APIError.invalid(self.path(name), f"must be a number, got {type_name(value)}")
        if not math.isfinite(value):
            raise APIError.invalid(self.path(name), "must be a finite number")
        _check_range(self.path(name), value, low, high)
        return float(value)

    def boolean(self, name: str, *, default: bool = False) -> bool:
        value = self._body.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise APIError.invalid(self.path(name), f"must be a boolean, got {type_name(value)}")
        return value

    def string(
        self, name: str, *, choices: tuple[str, ...] | None = None, default: Any = None
    ) -> Any:
        value = self._body.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise APIError.invalid(self.path(name), f"must be a string, got {type_name(value)}")
        if choices is not None and value not in choices:
            raise APIError.invalid(self.path(name), f"must be one of {', '.join(choices)}")
        return value

    def obj(self, name: str) -> BodyReader | None:
        value = self._body.get(name)
        if value is None:
            return None
        return BodyReader(value, where=self.path(name))

    def unsupported(self, name: str, *, allowed: tuple[Any, ...], why: str) -> None:
        """Refuse a known OpenAI field whose non-default value we would otherwise ignore."""
        value = self._body.get(name)
        if value is None or any(_same_value(value, ok) for ok in allowed):
            return
        raise APIError.invalid(self.path(name), why, code="unsupported_parameter")


class UnknownFields:
    """What one request does with fields it does not know: refuse the first (strict, OpenAI's
    behaviour: 400 `unknown_parameter`) or remember them all to be logged once and ignored
    (vLLM's behaviour)."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.ignored: list[str] = []

    def check(self, reader: BodyReader, known: Iterable[str]) -> None:
        if self.strict:
            reader.refuse_unknown(known)
        else:
            self.ignored.extend(reader.unknown(known))


def _same_value(value: Any, allowed: Any) -> bool:
    """JSON equality where 0 == 0.0 but true != 1."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return value == allowed
    return type(value) is type(allowed) and value == allowed


def _check_range(path: str, value: float, low: float | None, high: float | None) -> None:
    if low is not None and value < low:
        raise APIError.invalid(path, f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise APIError.invalid(path, f"must be <= {high}, got {value}")
