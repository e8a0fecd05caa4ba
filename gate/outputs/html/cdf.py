"""The latency CDF figures of the HTML report: TTFT, ITL and E2E over the measured window, split
by priority and by length class where a profile has more than one.

Owns the quantile grid (dense in the tail, so the p99 region stays visible) and each figure's
lines and labels. It does not draw (`gate.outputs.html.svg`).
"""

from __future__ import annotations

import numpy as np

from gate.gates.spec import Scope
from gate.metrics import measurements
from gate.outputs.html.figure import Figure, classes_of, measure_in
from gate.outputs.html.svg import Line
from gate.rundir.run import ProfileData
from gate.units import UnitKind, format_value
from gate.verdicts.assess import point_value

__all__ = ["CDF_METRICS", "cdf_figure"]

_CDF_POINTS = 300


def _cdf_line(label: str, values: np.ndarray, unit: UnitKind) -> Line:
    # Quantiles on a grid dense in the tail: the p99 region stays visible in 300 points.
    probabilities = np.unique(
        np.concatenate(
            [
                np.linspace(0.0, 1.0, _CDF_POINTS // 2),
                1.0 - np.geomspace(1e-4, 0.1, _CDF_POINTS // 2),
            ]
        )
    )
    if len(values) <= _CDF_POINTS:
        x = np.sort(values)
        y = np.arange(1, len(x) + 1) / len(x)
    else:
        x = np.quantile(values, probabilities, method="inverted_cdf")
        y = probabilities
    p99 = point_value(measurements.Samples(values=values), "p99")
    text = f"{label} (n={len(values)}, p99 {format_value(p99, unit)})"
    return Line(label=text, x=x, y=y, step=True)


CDF_METRICS = (
    ("ttft", "TTFT", "time to first token"),
    ("itl", "ITL", "inter-token latency (per token)"),
    ("e2e", "E2E", "end-to-end latency (ok requests)"),
)


def cdf_figure(profile: ProfileData, metric: str, short: str, long: str) -> Figure:
    groups: list[tuple[str, Scope]] = [("all", Scope())]
    for key in ("priority", "length_class"):
        classes = classes_of(profile, key)
        if len(classes) > 1:
            groups.extend(
                (f"{key.replace('_class', '')}={c}", Scope(**{key: (c,)})) for c in classes
            )
    lines, reasons = [], []
    for label, scope in groups:
        measurement = measure_in(profile, metric, "p99", scope, warmup=None)
        if isinstance(measurement, measurements.NoData):
            reasons.append(measurement.reason)
        elif isinstance(measurement, measurements.Samples) and len(measurement.values):
            lines.append(_cdf_line(label, measurement.values, UnitKind.DURATION))
    common = {
        "key": f"{metric}-cdf",
        "title": f"{short} distribution — {long}",
        "x_label": short,
        "y_label": "share of samples ≤ x",
        "x_unit": UnitKind.DURATION,
        "y_unit": UnitKind.RATIO,
    }
    if not lines:
        reason = reasons[0] if reasons else f"no {short} samples in the measured window"
        return Figure(**common, no_data=reason)
    values = np.concatenate([ln.x for ln in lines])
    positive = values[values > 0]
    x_log = len(positive) == len(values) and positive.max() / positive.min() > 30
    return Figure(
        **common,
        lines=tuple(lines),
        x_log=x_log,
        y_min=0.0,
        y_max=1.0,
        note="warm-up excluded; x axis logarithmic" if x_log else "warm-up excluded",
    )
