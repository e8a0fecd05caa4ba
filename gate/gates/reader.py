"""The YAML layer of gates files: plain data with the line of every key path, and key-path errors.

Owns GatesFileError (`FILE:LINE: key.path: message`), composing YAML text into plain data while
remembering where each key stood, and the typed field readers (mapping with allowed keys, number
in a range, boolean, non-empty text, duration) every part of the schema uses to raise those
errors. It does not know the gates file schema (`gate.gates.file`, `gate.gates.definition`,
`gate.gates.preset_schema`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import yaml

from gate.errors import BatchgateError, ExitCode
from gate.units import UnitError, UnitKind, parse_quantity

__all__ = ["NAME_RE", "FieldReader", "GatesFileError", "Located", "compose"]

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")  # gate and preset names

_PARENT_RE = re.compile(r"(\.[^.\[]+|\[\d+\])$")


class GatesFileError(BatchgateError, ValueError):
    """A problem in a gates file; str() is `FILE:LINE: key.path: message`."""

    default_exit_code = ExitCode.INVALID_GATES

    def __init__(self, *, path: str, line: int | None, key_path: str, message: str) -> None:
        self.path = path
        self.line = line
        self.key_path = key_path
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return (
            f"{where}: {self.key_path}: {self.message}"
            if self.key_path
            else f"{where}: {self.message}"
        )


class Located:
    """Plain data plus the line of every key path, from yaml nodes (for error messages)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: dict[str, int] = {}
        self._constructor = yaml.constructor.SafeConstructor()

    def error(self, key_path: str, message: str) -> GatesFileError:
        # A key that is absent (e.g. a missing `name`) points at its nearest present parent.
        probe, line = key_path, self.lines.get(key_path)
        while line is None and probe:
            parent = _PARENT_RE.sub("", probe)
            probe = parent if parent != probe else ""  # a top-level key's parent is the root
            line = self.lines.get(probe)
        return GatesFileError(path=self.path, line=line, key_path=key_path, message=message)

    def build(self, node: yaml.Node, key_path: str) -> Any:
        self.lines.setdefault(key_path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise self._at(key_node, key_path, "mapping keys must be plain names")
                key = str(self._constructor.construct_object(key_node))
                child = f"{key_path}.{key}" if key_path else key
                if key in result:
                    raise self._at(key_node, child, "duplicate key")
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.build(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, f"{key_path}[{i}]") for i, item in enumerate(node.value)]
        return self._constructor.construct_object(node)

    def _at(self, node: yaml.Node, key_path: str, message: str) -> GatesFileError:
        return GatesFileError(
            path=self.path, line=node.start_mark.line + 1, key_path=key_path, message=message
        )


def compose(text: str, *, path: str) -> tuple[Any, Located]:
    """Parse YAML text into plain data plus its key-path line map; GatesFileError on bad YAML."""
    located = Located(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.context_mark is not None and exc.problem:
            problem += f" ({exc.context}, which began on line {exc.context_mark.line + 1})"
        raise GatesFileError(
            path=path, line=line, key_path="", message=f"YAML syntax: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise GatesFileError(path=path, line=None, key_path="", message=f"YAML: {exc}") from None
    if node is None:
        raise GatesFileError(
            path=path, line=1, key_path="", message="empty file; start with `version: 1`"
        )
    try:
        data = located.build(node, "")
    except yaml.YAMLError as exc:
        raise GatesFileError(path=path, line=None, key_path="", message=f"YAML: {exc}") from None
    return data, located


class FieldReader:
    """Typed readers of one value at a key path; each raises GatesFileError pointing at it."""

    def __init__(self, located: Located) -> None:
        self.loc = located

    def err(self, key_path: str, message: str) -> GatesFileError:
        return self.loc.error(key_path, message)

    def mapping(self, value: Any, key_path: str, allowed: Sequence[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(key_path, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise self.err(
                    f"{key_path}.{key}" if key_path else key,
                    f"unknown key {key!r} (allowed: {', '.join(allowed)})",
                )
        return value

    def number(self, value: Any, key_path: str, *, low: float, high: float = math.inf) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(key_path, f"expected a number, got {value!r}")
        if not low <= value <= high:
            raise self.err(key_path, f"must lie in [{low}, {high}], got {value}")
        return float(value)

    def boolean(self, value: Any, key_path: str) -> bool:
        if not isinstance(value, bool):
            raise self.err(key_path, f"expected true or false, got {value!r}")
        return value

    def text(self, value: Any, key_path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(key_path, f"expected a non-empty string, got {value!r}")
        return value

    def seconds(self, value: Any, key_path: str) -> float:
        try:
            seconds = parse_quantity(value, kind=UnitKind.DURATION)
        except UnitError as exc:
            raise self.err(key_path, str(exc)) from None
        if seconds < 0:
            raise self.err(key_path, "must not be negative")
        return seconds
