"""The report's capacity curve: what the calibration's sweep measured at each concurrency.

Owns one section made from manifest.json's `calibration.capacity_sweep` (concurrency → output
tokens/s, completed requests/s, E2E median, failures and 429s, the load generator's workers and
validity), with the stop, the knee and the stated limit in words. It does not measure (the
calibration, `gate.orchestrator.capacity_sweep`) nor draw a chart: a table of a handful of rows
reads as well.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from gate.units import UnitKind, format_value

__all__ = ["capacity_section"]


def _e(value: object) -> str:
    return html.escape("—" if value is None else str(value))


def _row(step: Mapping[str, Any], sweep: Mapping[str, Any]) -> str:
    e2e = step.get("e2e_p50")
    # The chosen step by its phase: with --workers auto one concurrency may have two rows (the
    # saturated load generator's, then the one with more workers). Older runs: by users.
    phase = sweep.get("capacity_phase")
    chosen = (
        step.get("phase") == phase if phase else step.get("users") == sweep.get("capacity_users")
    )
    mark = " ← capacity" if chosen else ""
    cells = [
        f"{_e(step.get('users'))}{mark}",
        _e(step.get("workers", 1)),
        f"{float(step.get('output_tokens_per_second') or 0):.0f}",
        f"{float(step.get('rps') or 0):.1f}",
        "—" if e2e is None else format_value(float(e2e), UnitKind.DURATION),
        f"{_e(step.get('failed'))} / {_e(step.get('rate_limited'))}",
        "yes" if step.get("client_valid") else f"no: {'; '.join(step.get('client_reasons') or [])}",
    ]
    return "<tr>" + "".join(f"<td>{_e(c) if i else c}</td>" for i, c in enumerate(cells)) + "</tr>"


def capacity_section(manifest: Mapping[str, Any] | None) -> str:
    """The section, or "" for a run without a measured sweep (reused, off, or older runs)."""
    calibration = (manifest or {}).get("calibration")
    sweep = calibration.get("capacity_sweep") if isinstance(calibration, dict) else None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("curve"), list):
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "closed-loop users",
            "load-generator workers",
            "output tokens/s",
            "req/s",
            "E2E p50",
            "failed / 429",
            "client valid",
        )
    )
    rows = "".join(_row(s, sweep) for s in sweep["curve"] if isinstance(s, dict))
    stated = sweep.get("limit")
    limit: dict[str, Any] = stated if isinstance(stated, dict) else {}
    words = (
        f"Stopped: {_e(sweep.get('stop'))} — {_e(sweep.get('detail'))}. Knee at "
        f"{_e(sweep.get('knee_users'))} users; stated limit {_e(limit.get('users'))} "
        f"({_e(limit.get('source'))}); "
        + ("saturated." if sweep.get("saturated") else "<b>not saturated: a lower bound</b>.")
    )
    return (
        '<section id="capacity"><h2>Calibration: capacity curve</h2>'
        f"<table><tr>{head}</tr>{rows}</table><p>{words}</p></section>"
    )
