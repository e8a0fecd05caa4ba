"""A small vocabulary of JSON shapes, and the first field of a value that does not fit one.

Owns `Shape` (number, count, text, bool, any, object with typed fields, map, list, one of
several, each nullable or not) and `problem(value, shape)`, which names the first field of the
wrong type as `field: what is wrong`; the readers prefix the file's name and decide what a
misfit means (`gate.rundir.shapes` declares the run directory's files, `gate.calibration`
calibration.json). Keys a shape does not name are allowed (a newer writer may add fields); which
keys must be present is each reader's rule, not this module's. It reads no files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANY",
    "BOOL",
    "COUNT",
    "NUMBER",
    "OPT_COUNT",
    "OPT_NUMBER",
    "OPT_TEXT",
    "TEXT",
    "Shape",
    "listing",
    "mapping",
    "nullable",
    "obj",
    "oneof",
    "problem",
]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(frozen=True)
class Shape:
    """What a JSON value must be: `kind` one of number, count, text, bool, any, object, map,
    list, oneof; `nullable` allows null."""

    kind: str
    nullable: bool = False
    fields: Mapping[str, Shape] = field(default_factory=dict)  # object
    item: Shape | None = None  # map values, list items
    options: tuple[Shape, ...] = ()  # oneof

    def describe(self) -> str:
        text = {
            "number": "a number",
            "count": "a whole number >= 0",
            "text": "text",
            "bool": "true or false",
            "any": "any value",
            "object": "an object",
            "map": "an object",
            "list": "a list",
        }.get(self.kind) or " or ".join(o.describe() for o in self.options)
        return f"{text} or null" if self.nullable else text


def nullable(shape: Shape) -> Shape:
    """`shape`, or null."""
    return Shape(shape.kind, True, shape.fields, shape.item, shape.options)


NUMBER, COUNT, TEXT, BOOL, ANY = (Shape(k) for k in ("number", "count", "text", "bool", "any"))


def obj(**fields: Shape) -> Shape:
    return Shape("object", fields=fields)


def mapping(item: Shape) -> Shape:
    return Shape("map", item=item)


def listing(item: Shape) -> Shape:
    return Shape("list", item=item)


def oneof(*options: Shape) -> Shape:
    return Shape("oneof", options=options)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def problem(value: Any, shape: Shape, where: str = "") -> str | None:
    """`field: expected X, got Y` for the first value of the wrong shape, else None."""
    if value is None:
        if shape.nullable or shape.kind == "any":
            return None
        return _wrong(where, shape, value)
    kind = shape.kind
    if kind == "any":
        return None
    if kind == "number":
        return None if _is_number(value) else _wrong(where, shape, value)
    if kind == "count":
        good = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if good else _wrong(where, shape, value)
    if kind == "text":
        return None if isinstance(value, str) else _wrong(where, shape, value)
    if kind == "bool":
        return None if isinstance(value, bool) else _wrong(where, shape, value)
    if kind == "oneof":
        if any(problem(value, option) is None for option in shape.options):
            return None
        return _wrong(where, shape, value)
    if kind in ("object", "map"):
        if not isinstance(value, dict):
            return _wrong(where, shape, value)
        if kind == "object":
            for key, inner in shape.fields.items():
                if key in value:
                    found = problem(value[key], inner, _join(where, key))
                    if found:
                        return found
            return None
        assert shape.item is not None
        for key, item in value.items():
            found = problem(item, shape.item, _join(where, str(key)))
            if found:
                return found
        return None
    if kind == "list":
        if not isinstance(value, list):
            return _wrong(where, shape, value)
        assert shape.item is not None
        for index, item in enumerate(value):
            found = problem(item, shape.item, f"{where}[{index}]")
            if found:
                return found
        return None
    raise ValueError(f"unknown shape kind {kind!r}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _wrong(where: str, shape: Shape, value: Any) -> str:
    return f"{where or 'the file'}: expected {shape.describe()}, got {_kind(value)}"


OPT_TEXT, OPT_NUMBER, OPT_COUNT = nullable(TEXT), nullable(NUMBER), nullable(COUNT)
