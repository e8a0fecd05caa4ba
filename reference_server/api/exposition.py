"""The Prometheus text exposition of a registry, byte for byte what prometheus_client writes.

`prometheus_client.generate_latest` formats every sample from scratch: it validates and escapes
each label name and value and the metric name, per sample, per scrape. Our label sets never
change (priority classes, histogram bounds, finish reasons), so `Exposition` keeps the text
before the value of each (name, labels) it has seen and only formats the number: a scrape of
the server's ~500 lines costs a fraction of the library's time. That matters because /metrics
is served on the event loop that also streams every token, and a scrape taken while the engine
is saturated must not stall the streams (or itself wait behind them).

Anything this fast path does not handle the way the library does (sample timestamps, a metric
type it does not know) makes that scrape fall back to `generate_latest`, so the output is always
the library's (its default escaping: names with characters outside the legacy set get
underscores, label values stay UTF-8).
"""

from __future__ import annotations

import operator
from typing import Any

from prometheus_client import Histogram
from prometheus_client import metrics as client_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.utils import floatToGoString
from prometheus_client.values import MutexValue

__all__ = ["Exposition"]

# OpenMetrics type -> (name suffix, Prometheus text type), as generate_latest munges them.
_TYPES = {
    "counter": ("_total", "counter"),
    "gauge": ("", "gauge"),
    "histogram": ("", "histogram"),
    "summary": ("", "summary"),
    "info": ("_info", "gauge"),
    "stateset": ("", "gauge"),
    "gaugehistogram": ("", "histogram"),
    "unknown": ("", "untyped"),
}
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_RAW = operator.attrgetter("_value")
# Bounds the memo: label values that grow without end (none of ours do) must not grow it.
_MAX_PREFIXES = 20_000


def _number(value: Any) -> str:
    """floatToGoString, without its checks for the common case (a finite number whose repr
    Go would print the same way: no exponent switch needed)."""
    number = float(value)
    text = repr(number)
    if text[-1] == "f" or text[-1] == "n" or (number > 0 and text.find(".") > 6):
        return floatToGoString(number)  # inf, nan, or Go's earlier switch to an exponent
    return text


class _Fallback(Exception):
    """This scrape needs the library's own formatter."""


class Exposition:
    """Renders one registry; keeps the formatted label text of every sample it has seen."""

    def __init__(self, registry: Any) -> None:
        self._registry = registry
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._headers: dict[tuple[str, str, str], str] = {}
        self._children: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
        # Per histogram child: its raw values at the last scrape and the lines they made.
        self._child_text: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[tuple, str, str]] = {}

    def render(self) -> bytes:
        try:
            return self._render()
        except _Fallback:
            return generate_latest(self._registry)

    def _render(self) -> bytes:
        output: list[str] = []
        for collector in self._collectors():
            if type(collector) is Histogram:
                self._histogram(collector, output)
            else:
                self._families(collector.collect(), output)
        return "".join(output).encode("utf-8")

    def _collectors(self) -> list[Any]:
        # What CollectorRegistry.collect() walks, in its order; a registry built differently
        # (target info, another class) is the library's to render.
        names = getattr(self._registry, "_collector_to_names", None)
        lock = getattr(self._registry, "_lock", None)
        if names is None or lock is None or getattr(self._registry, "_target_info", None):
            raise _Fallback
        with lock:
            return list(names)

    def _families(self, metrics: Any, output: list[str]) -> None:
        for metric in metrics:
            kind = _TYPES.get(metric.type)
            if kind is None:
                raise _Fallback
            output.append(self._header(metric.name + kind[0], kind[1], metric.documentation))
            extra: dict[str, list[str]] = {}
            for sample in metric.samples:
                line = self._line(sample)
                for suffix in _OM_SUFFIXES:
                    if sample.name == metric.name + suffix:
                        extra.setdefault(suffix, []).append(line)
                        break
                else:
                    output.append(line)
            for suffix, lines in sorted(extra.items()):
                output.append(self._header(metric.name + suffix, "gauge", metric.documentation))
                output.extend(lines)

    def _histogram(self, histogram: Any, output: list[str]) -> None:
        """Histogram.collect() and its formatting in one pass, reading the children's bucket
        values as _child_samples does (same sums, same order, same _created section) without
        building a Sample per bucket."""
        try:
            name, doc = histogram._name, histogram._documentation
            if histogram._unit or bool(histogram._is_parent()) != bool(histogram._labelnames):
                raise _Fallback
            if histogram._labelnames:
                with histogram._lock:
                    children = list(histogram._metrics.items())
            else:
                children = [((), histogram)]
            label_names = tuple(histogram._labelnames)
            created: list[str] = []
            output.append(self._header(name, "histogram", doc))
            for values, child in children:
                series = tuple(zip(label_names, values, strict=True))
                prefixes = self._series(name, series, child._upper_bounds)
                lines, created_line = self._child_lines(name, series, prefixes, child)
                output.append(lines)
                if client_metrics._use_created:
                    created.append(created_line)
        except AttributeError as error:  # prometheus_client's internals changed
            raise _Fallback from error
        if created:
            output.append(self._header(name + "_created", "gauge", doc))
            output.extend(created)

    def _child_lines(
        self, name: str, series: tuple[tuple[str, str], ...], prefixes: list[str], child: Any
    ) -> tuple[str, str]:
        """One child's bucket, _count and _sum lines, and its _created line. Formatting is most
        of a scrape's cost and most children have not changed since the last one (under load
        only the step histograms move between two scrapes): a child whose raw values are those
        of the last scrape gets the same text back. Values are read as `get()` reads them,
        without its lock per bucket (a float read is atomic under the GIL); a value class other
        than the library's default takes the public way."""
        buckets, total_value = child._buckets, child._sum
        # With the child's creation time: a child removed and made again starts from the same
        # zeros, but not at the same time.
        if type(total_value) is MutexValue:
            raw = (child._created, total_value._value, *map(_RAW, buckets))
        else:
            raw = (child._created, total_value.get(), *(bucket.get() for bucket in buckets))
        key = (name, series)
        cached = self._child_text.get(key)
        if cached is not None and cached[0] == raw:
            return cached[1], cached[2]
        lines = []
        total = 0.0
        for prefix, count in zip(prefixes, raw[2:], strict=False):
            total += count
            lines.append(f"{prefix}{_number(total)}\n")
        count_prefix, sum_prefix, created_prefix = prefixes[-3:]
        lines.append(f"{count_prefix}{_number(total)}\n")
        if child._upper_bounds[0] >= 0:
            lines.append(f"{sum_prefix}{_number(raw[1])}\n")
        text, created = "".join(lines), f"{created_prefix}{_number(child._created)}\n"
        if len(self._child_text) >= _MAX_PREFIXES:
            self._child_text.clear()
        self._child_text[key] = (raw, text, created)
        return text, created

    def _series(
        self, name: str, series: tuple[tuple[str, str], ...], bounds: list[float]
    ) -> list[str]:
        """Line prefixes of one histogram child: each bucket, then _count, _sum, _created."""
        key = (name, series)
        prefixes = self._children.get(key)
        if prefixes is None or len(prefixes) != len(bounds) + 3:
            prefixes = [
                self._prefix(name + "_bucket", tuple(sorted((*series, ("le", floatToGoString(b))))))
                for b in bounds
            ]
            prefixes += [self._prefix(name + suffix, series) for suffix in ("_count", "_sum")]
            prefixes.append(self._prefix(name + "_created", series))
            if len(self._children) >= _MAX_PREFIXES:
                self._children.clear()
            self._children[key] = prefixes
        return prefixes

    def _header(self, name: str, kind: str, documentation: str) -> str:
        key = (name, kind, documentation)
        header = self._headers.get(key)
        if header is None:
            escaped = openmetrics.escape_metric_name(name, openmetrics.UNDERSCORES)
            doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
            header = f"# HELP {escaped} {doc}\n# TYPE {escaped} {kind}\n"
            self._headers[key] = header
        return header

    def _line(self, sample: Any) -> str:
        if sample.timestamp is not None:
            raise _Fallback
        labels = tuple(sorted(sample.labels.items())) if sample.labels else ()
        key = (sample.name, labels)
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = self._prefix(sample.name, labels)
            if len(self._prefixes) >= _MAX_PREFIXES:
                self._prefixes.clear()
            self._prefixes[key] = prefix
        return f"{prefix}{_number(sample.value)}\n"

    @staticmethod
    def _prefix(name: str, labels: tuple[tuple[str, str], ...]) -> str:
        text = openmetrics.escape_metric_name(name, openmetrics.UNDERSCORES)
        if labels:
            pairs = []
            for key, value in labels:
                label = openmetrics.escape_label_name(key, openmetrics.UNDERSCORES)
                escaped = openmetrics._escape(value, openmetrics.ALLOWUTF8, False)
                pairs.append(f'{label}="{escaped}"')
            text += "{" + ",".join(pairs) + "}"
        return text + " "
