"""Adds a named preset to a gates file as text, keeping the user's comments and layout.

Owns finding the top-level `presets:` block (or appending one), writing the preset there as
YAML with a comment line saying where it came from, refusing a name that is already taken, and
checking that the file still parses as a gates file before it is replaced (atomically). It does
not decide the preset (`batchgate tune`).
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

__all__ = ["PresetWriteError", "add_preset"]

_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*\s*:")


class PresetWriteError(BatchgateError, ValueError):
    default_exit_code = ExitCode.USAGE


def _block(name: str, preset: Mapping[str, Any], comment: str) -> list[str]:
    body = yaml.safe_dump({name: dict(preset)}, sort_keys=False, default_flow_style=None)
    return [f"  # {comment}\n", *("  " + line + "\n" for line in body.splitlines())]


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
    at = next(
        (i for i, line in enumerate(lines) if re.match(r"^presets\s*:\s*(#.*)?$", line)), None
    )
    block = _block(name, preset, comment)
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
