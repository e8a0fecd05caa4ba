"""`batchgate rollback`: apply a named batching preset to a live server in one step.

Owns the command line, finding the preset in the gates file (`gate.gates.file.load(path)
.presets`), saving the previous settings so rolling forward is one command too, and the exit
codes (0 done or equivalents printed, 2 usage / unreachable / refused, 4 invalid gates file).
The HTTP exchange and the mapping for other servers live in gate.rollback.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.commands import _options as options
from gate.commands._common import default_gates_path
from gate.errors import ExitCode, UsageError
from gate.gates.file import load
from gate.rollback.equivalents import format_equivalents
from gate.rollback.live import (
    BatchingNotSupported,
    RollbackError,
    apply_preset,
)

TOKEN_ENV = "BATCHGATE_ADMIN_TOKEN"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "rollback",
        help="apply a batching preset from the gates file to a running server",
        description="PUT a named preset to the bundled server's /admin/batching and save the "
        "previous settings (roll forward with --from-file). For other servers, print the "
        "equivalent vLLM / Triton / TGI settings and change nothing.",
    )
    options.add(parser, "target", required=True, detail="the server to change")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--to", metavar="PRESET", help="preset name from the gates file")
    source.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="settings saved by an earlier rollback (roll forward)",
    )
    options.add(parser, "gates", detail=options.LOCAL_GATES_DEFAULT)
    options.add(parser, "admin_token")
    parser.add_argument(
        "--save-previous",
        type=Path,
        metavar="FILE",
        default=None,
        help="where to save the previous settings (default: a timestamped file here)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="HTTP timeout, seconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    token = args.admin_token or os.environ.get(TOKEN_ENV) or None
    try:
        if args.to is not None:
            name, preset = args.to, load_preset(args.gates, args.to)
        else:
            name, preset = str(args.from_file), load_saved(args.from_file)
    except UsageError as exc:
        print(f"batchgate rollback: {exc}", file=sys.stderr)
        return int(exc.code)
    try:
        result = apply_preset(args.target, preset, admin_token=token, timeout_seconds=args.timeout)
    except BatchingNotSupported as exc:
        # Nothing was rolled back: say how to do it by hand on that server, and do not exit 0
        # (a typo'd address that answers 404 must not look like a done rollback in CI).
        print(
            f"batchgate rollback: {exc}; not the bundled server: nothing was changed. "
            "The equivalent settings of other servers follow.",
            file=sys.stderr,
        )
        print(format_equivalents(name, preset))
        return int(exc.exit_code)
    except RollbackError as exc:
        print(f"batchgate rollback: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    path = args.save_previous or _default_save_path(args.target)
    try:
        save_previous(path, target=args.target, applied=name, settings=result.previous)
    except OSError as exc:
        print(f"batchgate rollback: applied, but cannot save {path}: {exc}", file=sys.stderr)
        print(json.dumps(result.previous, indent=2, sort_keys=True))
        return int(ExitCode.USAGE)
    print(f"Applied '{name}' to {args.target}.")
    print("Previous settings:")
    print(json.dumps(result.previous, indent=2, sort_keys=True))
    forward = shlex.join(
        ["batchgate", "rollback", "--target", args.target, "--from-file", str(path)]
    )
    print(f"Saved to {path}. Roll forward with:\n  {forward}")
    return int(ExitCode.PASSED)


def load_preset(gates_path: Path | None, name: str) -> dict[str, Any]:
    gates_path = default_gates_path() if gates_path is None else gates_path
    if not gates_path.is_file():
        raise UsageError(f"gates file {gates_path} not found (use --gates FILE)")
    try:
        gates = load(gates_path)
    except Exception as exc:  # the gates file's own error names file, line and key
        raise UsageError(str(exc), ExitCode.INVALID_GATES) from exc
    presets = getattr(gates, "presets", None) or {}
    if name not in presets:
        known = ", ".join(sorted(presets)) or "none defined"
        raise UsageError(f"unknown preset {name!r} in {gates_path} (presets: {known})")
    return preset_settings(presets[name])


def preset_settings(preset: Any) -> dict[str, Any]:
    """A preset as a plain settings dict, whether the gates file gives a mapping or an object."""
    if isinstance(preset, Mapping):
        return dict(preset)
    settings = getattr(preset, "settings", None)
    if isinstance(settings, Mapping):
        return dict(settings)
    if dataclasses.is_dataclass(preset) and not isinstance(preset, type):
        data = dataclasses.asdict(preset)
        data.pop("name", None)
        return data
    raise UsageError(f"preset has an unexpected form ({type(preset).__name__})")


def load_saved(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(f"{path} not found") from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    settings = data.get("settings") if isinstance(data, dict) else None
    if not isinstance(settings, dict) or not settings:
        raise UsageError(f"{path} holds no 'settings' object (was it saved by rollback?)")
    return settings


def save_previous(path: Path, *, target: str, applied: str, settings: dict[str, Any]) -> None:
    record = {
        "schema_version": 1,
        "target": target,
        "saved_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "replaced_by": applied,
        "settings": settings,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _default_save_path(target: str) -> Path:
    host = re.sub(r"[^A-Za-z0-9]+", "_", target.split("://", 1)[-1]).strip("_")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"batchgate-previous-{host}-{stamp}.json")
