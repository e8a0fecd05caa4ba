"""The HTML building blocks of report.html: style, gate table, figures, load and provenance tables.

Owns markup and wording: every piece returns an escaped HTML string, with inline CSS only (the
page must open offline, so nothing here refers to a script, font or stylesheet elsewhere). It
does not read files, measure anything or decide verdicts.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any

from gate.outputs.html.figure import Figure
from gate.outputs.html.svg import Chart, render_chart
from gate.outputs.summary import ordered
from gate.outputs.text import (
    format_delta,
    format_interval,
    format_margin,
    format_verdict_value,
    rollback_line,
)
from gate.units import UnitKind, format_value
from gate.verdicts.verdict import Evaluation, Status

__all__ = ["STYLE", "figure_html", "gate_table", "key_value_table", "load_table", "notes_list"]

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f24;
       margin: 0 auto; max-width: 1360px; padding: 16px 24px 48px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px;
     border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.result { display: inline-block; padding: 2px 10px; border-radius: 4px; font-weight: 600;
          color: #fff; }
.result.pass { background: #1a7f37; } .result.fail { background: #cf222e; }
.result.inconclusive { background: #8250df; } .result.no_data { background: #9a6700; }
.status { font-weight: 600; } .status.pass { color: #1a7f37; } .status.fail { color: #cf222e; }
.status.warn { color: #9a6700; } .status.inconclusive { color: #8250df; }
.status.no_data { color: #cf222e; } tr.monitor td { color: #57606a; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f6f8fa;
       padding: 1px 4px; border-radius: 3px; }
.figures { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px 20px; }
figure.plot { margin: 0; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 10px; }
figure.plot figcaption { font-weight: 600; margin-bottom: 4px; }
figure.plot .note { font-weight: 400; color: #57606a; font-size: 12px; }
figure.plot svg { width: 100%; height: auto; display: block; }
.nodata { color: #9a6700; background: #fff8c5; border: 1px dashed #d4a72c; padding: 24px 12px;
          text-align: center; border-radius: 4px; }
svg .grid { stroke: #eaeef2; stroke-width: 1; } svg .frame { stroke: #8c959f; }
svg .tick { font-size: 11px; fill: #57606a; } svg .axis-label { font-size: 12px; fill: #24292f; }
svg .legend { font-size: 11px; fill: #24292f; } svg .band-label { font-size: 10px; fill: #57606a; }
ul.notes { color: #57606a; font-size: 13px; } pre { font-size: 12px; margin: 0;
     white-space: pre-wrap; }
"""

_STATUS_TEXT = {
    Status.PASS: "PASS",
    Status.WARN: "WARN",
    Status.FAIL: "FAIL",
    Status.INCONCLUSIVE: "INCONCLUSIVE",
    Status.NO_DATA: "NO DATA",
}


def _e(value: Any) -> str:
    return html.escape("—" if value is None else str(value))


def _formatter(unit: UnitKind):  # type: ignore[no-untyped-def]
    return lambda value: format_value(value, unit)


def figure_html(figure: Figure, *, anchor: str) -> str:
    """One `<figure>`; `data-state` is `data` or `no-data` (tests and readers rely on it)."""
    state = "data" if figure.has_data else "no-data"
    note = f' <span class="note">— {_e(figure.note)}</span>' if figure.note else ""
    head = (
        f'<figure class="plot" id="{_e(anchor)}" data-figure="{_e(figure.key)}"'
        f' data-state="{state}"><figcaption>{_e(figure.title)}{note}</figcaption>'
    )
    if not figure.has_data:
        return f'{head}<div class="nodata">no data: {_e(figure.no_data)}</div></figure>'
    chart = Chart(
        x_label=figure.x_label,
        y_label=figure.y_label,
        lines=figure.lines,
        bands=figure.bands,
        x_log=figure.x_log,
        y_min=figure.y_min,
        y_max=figure.y_max,
        x_format=_formatter(figure.x_unit),
        y_format=_formatter(figure.y_unit),
    )
    return f"{head}{render_chart(chart)}</figure>"


def gate_table(evaluation: Evaluation) -> str:
    """Every verdict with value, threshold, margin, n, interval, baseline delta and rollback."""
    rows = []
    for verdict in ordered(evaluation):
        status = verdict.status.value
        label = _STATUS_TEXT[verdict.status] + (" (monitor)" if verdict.monitor else "")
        details = []
        if verdict.reason:
            details.append(_e(verdict.reason))
        if verdict.knob:
            details.append(f"knob: <code>{_e(verdict.knob)}</code>")
        command = rollback_line(verdict, evaluation)
        if command and verdict.status in (Status.FAIL, Status.WARN):
            details.append(f"rollback: <code>{_e(command)}</code>")
        details.extend(_e(note) for note in verdict.notes)
        scope = ", ".join(f"{k}={'|'.join(v)}" for k, v in verdict.scope.items() if k != "profile")
        rows.append(
            f'<tr class="{"monitor" if verdict.monitor else ""}">'
            f"<td>{'★ ' if verdict.key else ''}{_e(verdict.gate)}</td>"
            f"<td>{_e(verdict.profile)}</td>"
            f"<td>{_e(verdict.statistic)} {_e(verdict.metric)}"
            f"{'<br><small>' + _e(scope) + '</small>' if scope else ''}</td>"
            f'<td class="status {status}">{_e(label)}</td>'
            f'<td class="num">{_e(format_verdict_value(verdict))}</td>'
            f"<td>{_e(verdict.threshold)}</td>"
            f'<td class="num">{_e(format_margin(verdict))}</td>'
            f'<td class="num">{_e(format_interval(verdict))}</td>'
            f'<td class="num">{verdict.n}</td>'
            f'<td class="num">{_e(format_delta(verdict))}</td>'
            f"<td>{'<br>'.join(details)}</td></tr>"
        )
    head = (
        "<tr><th>gate</th><th>profile</th><th>metric</th><th>verdict</th><th>value</th>"
        "<th>threshold</th><th>margin</th><th>interval</th><th>n</th><th>Δ baseline</th>"
        "<th>reason · knob · rollback</th></tr>"
    )
    if not rows:
        rows.append(
            '<tr><td colspan="11">the gates file has no gates: nothing was checked</td></tr>'
        )
    return f'<table class="gates">{head}{"".join(rows)}</table>'


def key_value_table(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = []
    for key, value in pairs:
        if isinstance(value, (dict, list)):
            cell = f"<pre>{_e(json.dumps(value, indent=1, sort_keys=True))}</pre>"
        else:
            cell = _e(value)
        rows.append(f"<tr><th>{_e(key)}</th><td>{cell}</td></tr>")
    return f'<table class="kv">{"".join(rows)}</table>'


def load_table(load: dict[str, Any] | None) -> str:
    """What the load process says about its own measurement (load.json)."""
    if load is None:
        return '<p class="nodata">no data: load.json missing</p>'
    lag = load.get("schedule_lag_seconds") or {}
    cpu = load.get("client_cpu_ratio") or {}
    valid = load.get("measurement_valid")
    counts = load.get("counts_by_status") or {}
    counts = counts if isinstance(counts, dict) else {}
    reasons = "; ".join(load.get("invalid_reasons") or [])
    pairs = [
        ("mode / workers", f"{load.get('mode')} / {load.get('workers')}"),
        ("target rate", format_value(_num(load.get("target_rate_rps")), UnitKind.RATE)),
        ("achieved rate", format_value(_num(load.get("achieved_rate_rps")), UnitKind.RATE)),
        ("planned / sent", f"{load.get('planned_requests')} / {load.get('sent_requests')}"),
        ("counts by status", " · ".join(f"{k} {v}" for k, v in counts.items()) or "none"),
        ("ok streams ended without [DONE]", load.get("streams_ended_without_done")),
        ("schedule lag p99", format_value(_num(lag.get("p99")), UnitKind.DURATION)),
        ("client CPU max", format_value(_num(cpu.get("max")), UnitKind.RATIO)),
        ("measurement valid", f"{valid}" + (f" — {reasons}" if reasons else "")),
        ("ended", load.get("ended")),
    ]
    return key_value_table(pairs)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def notes_list(notes: Iterable[str]) -> str:
    items = [f"<li>{_e(n)}</li>" for n in notes]
    return f'<ul class="notes">{"".join(items)}</ul>' if items else ""
