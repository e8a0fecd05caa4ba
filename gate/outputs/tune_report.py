"""The outputs of `batchgate tune`: the candidates table (terminal and HTML), the trade-off figure
(throughput versus TTFT p99 per candidate, the passing Pareto front marked) and `tune.html`.

Owns rendering only: it reads the search's candidates and never measures or decides. The
candidates are `gate.tune.candidate.Candidate` objects (settings, label, origin, key and
measurements), read by attribute: outputs do not import the tune stage, which sits above them.
tune.json is `gate.outputs.tune_json`'s.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from gate.outputs.html.page import STYLE
from gate.outputs.html.svg import PALETTE

__all__ = [
    "candidates_table",
    "pareto_front",
    "preset_instructions",
    "tradeoff_svg",
    "write_html",
]


def preset_instructions(
    name: str, block: Path, gates_copy: Path, added_to: Path | None
) -> list[str]:
    """What the command prints about the winning preset: where it is and how to use it."""
    lines = [f"preset {name!r} written to {block}"]
    if added_to is not None:
        lines.append(f"  added to {added_to}")
    use = added_to or gates_copy
    lines += [
        f"  run with it:    batchgate run --gates {use} --preset {name}",
        f"  roll back to it: batchgate rollback --gates {use} --to {name} --target URL",
    ]
    if added_to is None:
        lines.append(
            f"  add it to a gates file: paste {block.name}'s entry under that file's presets: "
            f"(or append the whole block to a file without one), or tune again with "
            f"--write-gates FILE; {gates_copy} is the gates file judged here, with it"
        )
    return lines


def _interval(m: Any) -> str:
    if m.objective is None:
        return "n/a"
    lo, hi = m.objective_interval or (None, None)
    low = "-inf" if lo is None else f"{lo:.4g}"
    high = "inf" if hi is None else f"{hi:.4g}"
    return f"{m.objective:.4g} [{low}, {high}]"


def _rows(candidates: Sequence[Any], key_gates: Sequence[str]) -> list[list[str]]:
    rows = []
    for i, c in enumerate(candidates, start=1):
        for m in c.measurements:
            rows.append(
                [
                    str(i),
                    c.label,
                    c.origin,
                    m.scale,
                    m.outcome,
                    _interval(m),
                    "n/a" if m.throughput is None else f"{m.throughput:.4g}",
                    "n/a" if m.latency_p99 is None else f"{m.latency_p99 * 1000:.4g}",
                    *(m.gates.get(g, "—") for g in key_gates),
                    ", ".join(g for g in m.failed if g not in key_gates) or "—",
                ]
            )
    return rows


def key_gate_ids(candidates: Sequence[Any]) -> list[str]:
    """The gates shown as columns: the key gates (`key: true`) any candidate was judged on; the
    others show in one column only when they did not pass."""
    ids: dict[str, None] = {}
    for c in candidates:
        for m in c.measurements:
            ids.update(dict.fromkeys(m.key_gates))
    return list(ids)


def _headers(objective: str, key_gates: Sequence[str]) -> list[str]:
    return [
        "#",
        "settings",
        "origin",
        "scale",
        "verdict",
        f"{objective} [95% interval]",
        "output tok/s",
        "TTFT p99 ms",
        *key_gates,
        "other gates not passing",
    ]


def candidates_table(candidates: Sequence[Any], objective: str, title: str) -> Table:
    key_gates = key_gate_ids(candidates)
    table = Table(title=title)
    for header in _headers(objective, key_gates):
        table.add_column(header, overflow="fold")
    for row in _rows(candidates, key_gates):
        table.add_row(*row)
    return table


def _best_points(candidates: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Each candidate's measurement at its highest rung, where the figure has both axes."""
    out = []
    for c in candidates:
        ms = [m for m in c.measurements if m.throughput is not None and m.latency_p99 is not None]
        if ms:
            out.append((c, max(ms, key=lambda m: m.rung)))
    return out


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both (higher x, lower y)."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (x2 >= x and y2 <= y) and (x2 > x or y2 < y)
            for j, (x2, y2) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def tradeoff_svg(candidates: Sequence[Any], winner: Any) -> str:
    points = _best_points(candidates)
    if not points:
        return "<p>No candidate has both an output throughput and a TTFT p99.</p>"
    width, height, left, bottom, top, right = 640, 320, 70, 44, 20, 16
    xs = [m.throughput for _, m in points]
    ys = [m.latency_p99 * 1000 for _, m in points]  # type: ignore[operator]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = 0.0, max(ys)
    if x_hi - x_lo <= 0:
        x_lo, x_hi = x_lo * 0.9, x_hi * 1.1 + 1e-9
    pad = 0.05 * (x_hi - x_lo)
    x_lo, x_hi, y_hi = x_lo - pad, x_hi + pad, y_hi * 1.1 + 1e-9

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - (y - y_lo) / (y_hi - y_lo) * (height - top - bottom)

    passing = [i for i, (_, m) in enumerate(points) if m.outcome == "pass"]
    front = [passing[k] for k in pareto_front([(xs[i], ys[i]) for i in passing])]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="throughput versus TTFT p99 per candidate">'
    ]
    parts.append(
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        f'stroke="#444"/><line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" '
        'stroke="#444"/>'
    )
    for k in range(5):
        xv = x_lo + k * (x_hi - x_lo) / 4
        yv = y_lo + k * (y_hi - y_lo) / 4
        parts.append(
            f'<text x="{px(xv):.1f}" y="{height - bottom + 16}" font-size="11" '
            f'text-anchor="middle">{xv:.4g}</text>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{py(yv) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{yv:.4g}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 6}" font-size="12" '
        'text-anchor="middle">output tokens/s</text>'
    )
    parts.append(
        f'<text x="14" y="{(top + height - bottom) / 2}" font-size="12" '
        f'text-anchor="middle" transform="rotate(-90 14 {(top + height - bottom) / 2})">'
        "TTFT p99 (ms)</text>"
    )
    if len(front) > 1:
        ordered = sorted(front, key=lambda i: xs[i])
        line = " ".join(f"{px(xs[i]):.1f},{py(ys[i]):.1f}" for i in ordered)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="{PALETTE[2]}" stroke-dasharray="4 3"/>'
        )
    for i, (c, m) in enumerate(points):
        ok = m.outcome == "pass"
        colour = PALETTE[2] if i in front else (PALETTE[0] if ok else PALETTE[1])
        fill = colour if ok else "white"
        r = 7 if winner is not None and c.key == winner.key else 4.5
        title = html.escape(f"{c.label}: {m.outcome}, {xs[i]:.4g} tok/s, TTFT p99 {ys[i]:.4g} ms")
        parts.append(
            f'<circle cx="{px(xs[i]):.1f}" cy="{py(ys[i]):.1f}" r="{r}" fill="{fill}" '
            f'stroke="{colour}" stroke-width="2"><title>{title}</title></circle>'
        )
    parts.append("</svg>")
    legend = (
        '<p class="legend">filled: every gate passed; hollow: a gate failed or was not '
        "conclusive; green: the passing front (no passing candidate has more throughput and a "
        "lower TTFT p99); larger: the winner</p>"
    )
    return "".join(parts) + legend


def write_html(
    path: Path,
    *,
    title: str,
    summary: Sequence[tuple[str, str]],
    candidates: Sequence[Any],
    winner: Any,
    objective: str,
) -> None:
    key_gates = key_gate_ids(candidates)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in _headers(objective, key_gates))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in _rows(candidates, key_gates)
    )
    facts = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<table>{facts}</table><h2>Trade-off</h2>{tradeoff_svg(candidates, winner)}"
        f"<h2>Every candidate tried</h2><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></body></html>"
    )
    path.write_text(page, encoding="utf-8")
