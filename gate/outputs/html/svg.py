"""Hand-rolled inline SVG line charts: axes with readable ticks, lines, shaded bands, a legend.

Owns geometry and markup only: scales (linear or log10), 1-2-5 tick placement, polylines that
break at gaps (NaN), shaded x-bands with labels, and escaping every text it writes. It does not
know what the numbers mean: callers pass tick formatters. The output needs no script, font or
stylesheet from outside (the page's CSS may style the class names used here).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PALETTE", "Band", "Chart", "Line", "render_chart"]

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_BAND_FILLS = ("#f0e442", "#56b4e9", "#cc79a7", "#009e73")

_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 70, 16, 26, 44
_LEGEND_ROW_PX = 16
_LEGEND_COLUMNS = 2


@dataclass(frozen=True, kw_only=True)
class Line:
    label: str
    x: np.ndarray
    y: np.ndarray
    dashed: bool = False
    step: bool = False  # draw as a step function (CDFs)
    markers: bool = False  # draw a dot at every point (sparse series)


@dataclass(frozen=True, kw_only=True)
class Band:
    start: float
    end: float
    label: str


@dataclass(frozen=True, kw_only=True)
class Chart:
    x_label: str
    y_label: str
    lines: tuple[Line, ...]
    bands: tuple[Band, ...] = ()
    x_log: bool = False
    y_min: float | None = None  # e.g. 0 for rates, or 0..1 for a CDF
    y_max: float | None = None
    x_format: Callable[[float], str] = str
    y_format: Callable[[float], str] = str
    width_px: int = 640
    height_px: int = 260


def _nice_step(span: float, target_ticks: int) -> float:
    raw = span / max(target_ticks, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _linear_ticks(low: float, high: float, target_ticks: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = _nice_step(high - low, target_ticks)
    first = math.ceil(low / step - 1e-9) * step
    count = math.floor((high - first) / step + 1e-9) + 1
    return [first + i * step for i in range(max(count, 1))]


def _log_ticks(low: float, high: float) -> list[float]:
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    ticks = [10.0**d for d in decades if low <= 10.0**d <= high]
    if len(ticks) < 3:  # a narrow log range: add 2x and 5x marks so the axis is readable
        ticks = sorted(
            m * 10.0**d for d in decades for m in (1, 2, 5) if low <= m * 10.0**d <= high
        )
    return ticks or [low, high]


class _Scale:
    def __init__(self, low: float, high: float, start_px: float, end_px: float, log: bool):
        self.log = log
        self.low, self.high = (math.log10(low), math.log10(high)) if log else (low, high)
        if self.high <= self.low:
            pad = abs(self.low) * 0.05 or 1.0
            self.low, self.high = self.low - pad, self.high + pad
        self.start_px, self.end_px = start_px, end_px

    def __call__(self, values: np.ndarray) -> np.ndarray:
        v = np.log10(np.maximum(values, 1e-300)) if self.log else values
        return self.start_px + (v - self.low) / (self.high - self.low) * (
            self.end_px - self.start_px
        )


def _finite_extent(arrays: Sequence[np.ndarray], *, positive: bool) -> tuple[float, float] | None:
    parts = [a[np.isfinite(a) & ((a > 0) if positive else True)] for a in arrays]
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    joined = np.concatenate(parts)
    return float(joined.min()), float(joined.max())


def _segments(x: np.ndarray, y: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Runs of consecutive finite points: a gap in the data is a gap in the line."""
    finite = np.isfinite(x) & np.isfinite(y)
    segments, start = [], None
    for i, ok in enumerate([*finite.tolist(), False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            segments.append((x[start:i], y[start:i]))
            start = None
    return segments


def _points(px: np.ndarray, py: np.ndarray, step: bool) -> str:
    if step and len(px) > 1:
        # Horizontal then vertical: the CDF holds its value until the next sample.
        xs = np.repeat(px, 2)[1:]
        ys = np.repeat(py, 2)[:-1]
        px, py = xs, ys
    return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py, strict=True))


def _text(x: float, y: float, content: str, *, anchor: str = "middle", cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{klass}>{html.escape(content)}</text>'
    )


def render_chart(chart: Chart) -> str:
    """The chart as an inline `<svg>` element (callers guarantee at least one finite point)."""
    lines = [ln for ln in chart.lines if len(ln.x)]
    x_extent = _finite_extent([ln.x for ln in lines], positive=chart.x_log)
    y_extent = _finite_extent([ln.y for ln in lines], positive=False)
    if x_extent is None or y_extent is None:
        raise ValueError("render_chart needs at least one finite point")
    band_edges = [b for band in chart.bands for b in (band.start, band.end)]
    x_low, x_high = x_extent
    if band_edges and not chart.x_log:
        x_low, x_high = min(x_low, *band_edges), max(x_high, *band_edges)
    y_low = y_extent[0] if chart.y_min is None else min(chart.y_min, y_extent[0])
    y_high = y_extent[1] if chart.y_max is None else max(chart.y_max, y_extent[1])
    if y_high <= y_low:  # a flat line (e.g. an empty queue): show it at the bottom
        y_high = y_low + (abs(y_low) or 1.0)
    elif chart.y_max is None:
        y_high += (y_high - y_low) * 0.05  # headroom so the peak is not on the frame
    legend_px = _LEGEND_ROW_PX * math.ceil(len(lines) / _LEGEND_COLUMNS) + 4
    width, height = chart.width_px, chart.height_px + legend_px
    left, right = _MARGIN_LEFT, width - _MARGIN_RIGHT
    top, bottom = _MARGIN_TOP, chart.height_px - _MARGIN_BOTTOM
    sx = _Scale(x_low, x_high, left, right, chart.x_log)
    sy = _Scale(y_low, y_high, bottom, top, False)
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' role="img">'
    ]
    for i, band in enumerate(chart.bands):
        bx = sx(np.array([band.start, band.end]))
        bx = np.clip(bx, left, right)
        out.append(
            f'<rect class="band" x="{bx[0]:.1f}" y="{top}" width="{max(bx[1] - bx[0], 0.5):.1f}"'
            f' height="{bottom - top}" fill="{_BAND_FILLS[i % len(_BAND_FILLS)]}"'
            f' fill-opacity="0.22"/>'
        )
        if bx[1] - bx[0] >= 6 * len(band.label):
            out.append(_text((bx[0] + bx[1]) / 2, top - 4, band.label, cls="band-label"))
        else:  # wider than its band: a row higher, so it does not run into its neighbour's
            out.append(_text(bx[0], top - 15, band.label, anchor="start", cls="band-label"))
    x_ticks = _log_ticks(10**sx.low, 10**sx.high) if chart.x_log else _linear_ticks(sx.low, sx.high)
    for tick in x_ticks:
        px = float(sx(np.array([tick]))[0])
        out.append(f'<line class="grid" x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}"/>')
        out.append(_text(px, bottom + 14, chart.x_format(tick), cls="tick"))
    for tick in _linear_ticks(sy.low, sy.high):
        py = float(sy(np.array([tick]))[0])
        out.append(f'<line class="grid" x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}"/>')
        out.append(_text(left - 6, py + 4, chart.y_format(tick), anchor="end", cls="tick"))
    out.append(
        f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"'
        f' fill="none"/>'
    )
    out.append(_text((left + right) / 2, bottom + 32, chart.x_label, cls="axis-label"))
    out.append(
        f'<text class="axis-label" text-anchor="middle" transform="translate(14 '
        f'{(top + bottom) / 2:.1f}) rotate(-90)">{html.escape(chart.y_label)}</text>'
    )
    for i, line in enumerate(lines):
        color = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        for seg_x, seg_y in _segments(line.x, line.y):
            px, py = sx(seg_x), sy(seg_y)
            if len(px) == 1 or line.markers:
                out.extend(
                    f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>'
                    for a, b in zip(px, py, strict=True)
                )
            if len(px) > 1:
                out.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="1.8"{dash}'
                    f' points="{_points(px, py, line.step)}"/>'
                )
        row, col = divmod(i, _LEGEND_COLUMNS)
        lx = left + col * ((right - left) / _LEGEND_COLUMNS)
        ly = chart.height_px + 8 + row * _LEGEND_ROW_PX
        out.append(
            f'<line x1="{lx:.1f}" y1="{ly - 4:.1f}" x2="{lx + 18:.1f}" y2="{ly - 4:.1f}"'
            f' stroke="{color}" stroke-width="3"{dash}/>'
        )
        out.append(_text(lx + 24, ly, line.label, anchor="start", cls="legend"))
    out.append("</svg>")
    return "".join(out)
