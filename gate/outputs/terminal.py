"""The rich terminal report of an evaluation: a gate table plus what failed and how to roll back.

Owns the renderable (tested by rendering to a fixed-width string console); only the CLI prints
it, on a console as wide as the terminal or `COLUMNS` (`gate.commands._common.output_console`).
The table fits the width it is rendered at: one row per gate with its statistic and metric when
that fits; otherwise each gate's name on a line of its own, whole, and its cells on the line below
in columns that shrink (the threshold and interval wrap inside theirs) rather than cut a value.
It does not decide verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gate.outputs.summary import ordered
from gate.outputs.text import (
    format_delta,
    format_interval,
    format_judged,
    format_margin,
    format_verdict_value,
    rollback_line,
)
from gate.verdicts.verdict import Evaluation, Status, Verdict

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
_TITLE = "batchgate verdicts"
# (header, justify) of the cells of a gate, after its name.
_CELLS = (
    ("verdict", "left"),
    ("judges", "left"),
    ("value", "right"),
    ("threshold", "left"),
    ("margin", "right"),
    ("interval", "right"),
    ("n", "right"),
    ("Δ base", "right"),
)
# Columns that may wrap inside a narrower width (text), in the order they give up width, and the
# least each keeps; the others (verdict, numbers) keep their width: a cut number is a wrong one.
_SHRINK = {"threshold": 12, "interval": 12}
# In the one-row-a-gate table: the columns that wrap before the table gives way to two lines a
# gate, and the least each keeps.
_WIDE_SHRINK = {"judges": 16, "threshold": 16}
_INDENT = 2


def _label(verdict: Verdict) -> Text:
    label, style = _STYLE[verdict.status]
    if verdict.monitor:
        label, style = f"{label} (mon)", "dim"
    return Text(label, style=style)


def _cells(verdict: Verdict) -> list[Text | str]:
    return [
        _label(verdict),
        format_judged(verdict),
        format_verdict_value(verdict),
        verdict.threshold or "—",
        format_margin(verdict),
        format_interval(verdict),
        str(verdict.n),
        format_delta(verdict),
    ]


def _name(verdict: Verdict) -> str:
    return ("★ " if verdict.key else "") + verdict.id


class _VerdictTable:
    """The gates as one table when it fits the width it is rendered at, else two lines a gate:
    its name and what it judges, then its cells."""

    def __init__(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts = list(verdicts)
        # Δ base only when a baseline was compared: an empty column is width for nothing.
        self.headers = [
            h for h in _CELLS if h[0] != "Δ base" or any(v.baseline_value for v in verdicts)
        ]
        # Two lines a gate: what it judges goes beside its name.
        self.narrow_headers = [h for h in self.headers if h[0] != "judges"]

    def _rows(self, headers: list[tuple[str, str]]) -> list[list[Text | str]]:
        keep = [i for i, h in enumerate(_CELLS) if h in headers]
        return [[cells[i] for i in keep] for cells in map(_cells, self.verdicts)]

    def wide(self) -> Table:
        table = Table(title=_TITLE, expand=False, show_lines=False)
        table.add_column("gate", justify="left", no_wrap=True)
        for header, justify in self.headers:
            # What it judges and the threshold may wrap in their column; values never do.
            wraps = header in _WIDE_SHRINK
            table.add_column(
                header,
                justify=justify,  # type: ignore[arg-type]
                no_wrap=not wraps,
                overflow="fold" if wraps else "ellipsis",
            )
        for verdict, row in zip(self.verdicts, self._rows(self.headers), strict=True):
            table.add_row(_name(verdict), *row)
        return table

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        names = [Text(_name(v)).cell_len for v in self.verdicts]
        natural = self._natural(self.headers)
        widths = [max([4, *names]), *natural]
        # Each column is padded by a space on both sides and has a rule on its right, plus the
        # table's left rule: the width the wide table takes without wrapping a cell, less what
        # the columns that may wrap can give up.
        slack = sum(
            max(0, width - _WIDE_SHRINK[header])
            for (header, _), width in zip(self.headers, natural, strict=True)
            if header in _WIDE_SHRINK
        )
        needed = sum(widths) + 3 * len(widths) + 1
        if needed <= options.max_width:
            yield self.wide()
            return
        narrow = Group(*self._narrow(options.max_width))
        if needed - slack <= options.max_width:
            # It fits with a few cells wrapped: whichever layout takes fewer lines.
            wide = self.wide()
            if len(console.render_lines(wide, options)) <= len(
                console.render_lines(narrow, options)
            ):
                yield wide
                return
        yield narrow

    def _natural(self, headers: list[tuple[str, str]]) -> list[int]:
        rows = self._rows(headers)
        return [
            max([Text(h).cell_len] + [Text(str(r[i])).cell_len for r in rows])
            for i, (h, _) in enumerate(headers)
        ]

    def _widths(self, max_width: int) -> list[int]:
        headers = self.narrow_headers
        widths = self._natural(headers)
        room = max_width - _INDENT - (len(widths) - 1)  # one space between columns
        names = [h for h, _ in headers]
        for name, least in _SHRINK.items():
            if name not in names:
                continue
            i = names.index(name)
            over = sum(widths) - room
            if over <= 0:
                break
            widths[i] = max(least, widths[i] - over)
        return widths

    def _grid(self, widths: list[int]) -> Table:
        grid = Table.grid(padding=(0, 1), pad_edge=False)
        for (header, justify), width in zip(self.narrow_headers, widths, strict=True):
            grid.add_column(header, justify=justify, width=width, overflow="fold")  # type: ignore[arg-type]
        return grid

    def _narrow(self, max_width: int) -> Iterator[RenderableType]:
        widths = self._widths(max_width)
        yield Text(_TITLE, style="italic", justify="center")
        header = self._grid(widths)
        header.add_row(*(Text(h, style="bold") for h, _ in self.narrow_headers))
        yield _Indented(header)
        yield Text("─" * min(max_width, _INDENT + sum(widths) + len(widths) - 1), style="dim")
        rows = self._rows(self.narrow_headers)
        for verdict, row in zip(self.verdicts, rows, strict=True):
            # The whole name on a line of its own (wrapped, never cut: "burst_r…" could be two
            # gates), and what it judges.
            line = Text(_name(verdict), style="bold", overflow="fold")
            line.append(f"  {format_judged(verdict)}", style="dim")
            yield line
            grid = self._grid(widths)
            grid.add_row(*row)
            yield _Indented(grid)


class _Indented:
    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        yield Padding(self.renderable, (0, 0, 0, _INDENT), expand=False)


def render(evaluation: Evaluation) -> RenderableType:
    parts: list[RenderableType] = [_VerdictTable(ordered(evaluation))]
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
