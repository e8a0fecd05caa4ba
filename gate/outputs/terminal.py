"""The rich terminal report of an evaluation: a gate table plus what failed and how to roll back.

Owns the renderable (tested by rendering to a fixed-width string console); only the CLI prints
it. It does not decide verdicts.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gate.outputs.summary import ordered
from gate.outputs.text import (
    format_delta,
    format_interval,
    format_margin,
    format_verdict_value,
    rollback_line,
)
from gate.verdicts.model import Evaluation, Status

__all__ = ["render"]

_STYLE = {
    Status.PASS: ("PASS", "green"),
    Status.WARN: ("WARN", "yellow"),
    Status.FAIL: ("FAIL", "bold red"),
    Status.INCONCLUSIVE: ("INCONCLUSIVE", "magenta"),
    Status.NO_DATA: ("NO DATA", "bold red"),
}
_RESULT = {
    0: ("PASSED", "bold green"),
    1: ("FAILED", "bold red"),
    3: ("INCONCLUSIVE", "bold magenta"),
    5: ("NO DATA / INVALID MEASUREMENT", "bold red"),
}


def render(evaluation: Evaluation) -> RenderableType:
    table = Table(title="batchgate verdicts", expand=False, show_lines=False)
    for header, justify in (
        ("gate", "left"),
        ("verdict", "left"),
        ("value", "right"),
        ("threshold", "left"),
        ("margin", "right"),
        ("interval", "right"),
        ("n", "right"),
        ("Δ base", "right"),
    ):
        # A narrow console wraps a gate's name; it never cuts it ("burst_r…" could be two gates).
        overflow = "fold" if header == "gate" else "ellipsis"
        table.add_column(header, justify=justify, overflow=overflow)  # type: ignore[arg-type]
    for verdict in ordered(evaluation):
        label, style = _STYLE[verdict.status]
        if verdict.monitor:
            label, style = f"{label} (mon)", "dim"
        name = ("★ " if verdict.key else "") + verdict.id
        table.add_row(
            name,
            Text(label, style=style),
            format_verdict_value(verdict),
            verdict.threshold or "—",
            format_margin(verdict),
            format_interval(verdict),
            str(verdict.n),
            format_delta(verdict),
        )
    parts: list[RenderableType] = [table]
    for verdict in ordered(evaluation):
        if verdict.status is Status.PASS or (verdict.monitor and verdict.status is not Status.FAIL):
            continue
        line = Text(f"{verdict.id}: ", style="bold")
        line.append(verdict.status.value, style=_STYLE[verdict.status][1])
        if verdict.reason:
            line.append(f" — {verdict.reason}")
        parts.append(line)
        if verdict.knob:
            parts.append(Text(f"  implicates batching knob: {verdict.knob}"))
        command = rollback_line(verdict, evaluation)
        if command and verdict.status is Status.FAIL:
            parts.append(Text(f"  rollback: {command}", style="cyan"))
    for note in evaluation.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    result, style = _RESULT.get(int(evaluation.exit_code), ("ERROR", "bold red"))
    parts.append(Text(f"result: {result} (exit {int(evaluation.exit_code)})", style=style))
    return Group(*parts)
