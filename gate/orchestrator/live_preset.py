"""A preset applied to a running target for the length of a run, and put back afterwards.

Owns refusing a preset a running server cannot take (start-only keys such as the KV size),
applying the live part through the target's `PUT /admin/batching`, returning the settings it
replaced (the manifest keeps them), and restoring them at the end of the run — also after a
failure or Ctrl-C, since the runner calls it from its cleanup. It does not decide whether to
restore (`--keep-preset`, `gate.orchestrator.runner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gate.errors import ExitCode, UsageError
from gate.orchestrator.preset_flags import live_settings, start_only

__all__ = ["apply_live_preset", "restore_settings"]


def apply_live_preset(
    url: str, name: str, preset: Mapping[str, Any], *, admin_token: str | None
) -> dict[str, Any]:
    """Apply `preset` to the target at `url`; the settings it replaced (raises UsageError)."""
    from gate.rollback.live import RollbackError, apply_preset

    fixed = start_only(preset)
    if fixed:
        raise UsageError(
            f"preset {name!r} sets {', '.join(fixed)}, which a running server cannot change; "
            "restart the target with it, or run without --target",
            ExitCode.USAGE,
        )
    try:
        result = apply_preset(url, live_settings(preset), admin_token=admin_token)
    except RollbackError as exc:
        raise UsageError(f"cannot apply preset {name!r}: {exc}", ExitCode.USAGE) from exc
    return dict(result.previous or {})


def restore_settings(url: str, settings: Mapping[str, Any], *, admin_token: str | None) -> str:
    """Put `settings` back on the target; a line saying whether it worked (never raises)."""
    from gate.rollback.live import RollbackError, apply_preset

    if not settings:
        return f"batchgate: no previous batching settings of {url} to restore"
    try:
        apply_preset(url, dict(settings), admin_token=admin_token)
    except RollbackError as exc:
        return f"batchgate: could not restore the batching settings of {url}: {exc}"
    return f"batchgate: restored the batching settings {url} had before the run"
