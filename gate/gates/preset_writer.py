"""Adds a named preset to a gates file as text, keeping the user's comments and layout.

Owns finding the top-level `presets:` block (or appending one), writing the preset there as
YAML with a comment line saying where it came from, refusing a name that is already taken, and
checking that the file still parses as a gates file before it is replaced (atomically); and the
preset as a block of its own (`preset_block`, what `batchgate tune` leaves in its directory). It
does not decide the preset (`batchgate tune`) or choose the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gate.errors import BatchgateError, ExitCode
from gate.gates.file import loads

__all__ = ["PresetWriteError", "add_preset", "check_preset_target", "preset_block"]

_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*\s*:")
_PRESETS = re.compile(r"^presets\s*:\s*(#.*)?$")


class PresetWriteError(BatchgateError, ValueError):
    default_exit_code = ExitCode.USAGE


def _block(name: str, preset: Mapping[str, Any], comment: str, indent: str) -> list[str]:
    body = yaml.safe_dump({name: dict(preset)}, sort_keys=False, default_flow_style=None)
    return [f"{indent}# {comment}\n", *(indent + line + "\n" for line in body.splitlines())]


def preset_block(name: str, preset: Mapping[str, Any], comment: str) -> str:
    """The preset as a `presets:` block of its own, to paste under a gates file's `presets:`
    (or append to a file that has none); it parses as a gates file's presets section."""
    return "presets:\n" + "".join(_block(name, preset, comment, "  "))


def _indent(lines: list[str], at: int) -> str:
    """The indentation of the presets block's first entry (2 spaces when it has none)."""
    for line in lines[at + 1 :]:
        if line.strip() and not line.lstrip().startswith("#"):
            width = len(line) - len(line.lstrip(" "))
            return " " * width if width else "  "
    return "  "


def check_preset_target(where: tuple[Path, Path], name: str) -> None:
    """Raises PresetWriteError now if `name` cannot be added to the file later: taken, or a
    `presets:` written in flow style (`presets: {...}`), which this writer does not edit."""
    target, source = where
    text = source.read_text(encoding="utf-8")
    current = loads(text, path=str(source))
    if name in current.presets:
        raise PresetWriteError(
            f"{target}: a preset named {name!r} exists already; choose another with --preset-name"
        )
    if current.presets and not any(_PRESETS.match(line) for line in text.splitlines()):
        raise PresetWriteError(
            f"{target}: its presets: section is not a block mapping; write it as 'presets:' "
            "with one preset per indented key, or give --write-gates another file"
        )


def add_preset(path: Path, text: str, name: str, preset: Mapping[str, Any], comment: str) -> str:
    """Write `text` (the gates file) with preset `name` added to `path`; the new text.
    Raises PresetWriteError when the name is taken or the result does not validate."""
    current = loads(text, path=str(path))
    if name in current.presets:
        raise PresetWriteError(
            f"{path}: a preset named {name!r} exists already; choose another with --preset-name"
        )
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    at = next((i for i, line in enumerate(lines) if _PRESETS.match(line)), None)
    block = _block(name, preset, comment, "  " if at is None else _indent(lines, at))
    if at is None:
        lines += ["\n", "presets:\n", *block]
    else:
        end = next((j for j in range(at + 1, len(lines)) if _TOP_KEY.match(lines[j])), len(lines))
        while end > at + 1 and not lines[end - 1].strip():
            end -= 1  # before the blank lines that end the block
        lines[end:end] = block
    new_text = "".join(lines)
    try:
        loads(new_text, path=str(path))
    except BatchgateError as exc:
        raise PresetWriteError(f"{path}: the preset would make the file invalid: {exc}") from None
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new_text, encoding="utf-8")
    os.replace(tmp, path)
    return new_text
