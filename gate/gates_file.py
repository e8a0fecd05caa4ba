"""The gates.yaml language (version 1): loading and validating a gates file into value objects.

Owns the file's schema: `version`, `settings`, `slos`, `gates`, `presets`, `profiles`; every
problem (YAML syntax, unknown keys, unknown metrics, a statistic that does not fit, a threshold
without a needed unit, a rollback naming no preset) is a GatesFileError naming file, line and
key path, raised before any load runs. `validate_against_buckets` adds the one check that needs
the target: histogram thresholds must fall on a bucket bound. It does not know how gates are
evaluated (`gate.evaluate`) or what the units mean beyond parsing (`gate.units`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gate import glossary
from gate.glossary import PERCENTILES, Shape
from gate.units import Threshold, UnitError, UnitKind, parse_quantity, parse_threshold

__all__ = [
    "GATES_FILE_VERSION",
    "Gate",
    "GatesFile",
    "GatesFileError",
    "Regression",
    "Scope",
    "Settings",
    "Slos",
    "load",
    "loads",
    "validate_against_buckets",
]

GATES_FILE_VERSION = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_PARENT_RE = re.compile(r"(\.[^.\[]+|\[\d+\])$")
BASELINE_MATCH_FIELDS = (
    "server_kind",
    "server_version",
    "model",
    "batching_hash",
    "profile_hash",
    "hardware",
)
# server_version is opt-in: manifest.json (docs/records.md) does not record it yet.
_DEFAULT_BASELINE_MATCH = ("server_kind", "model", "profile_hash", "hardware")
_POLICIES = ("continuous", "dynamic", "static")
_CLASS_KEYS = {
    "max_waiting": "int0",
    "max_batch_size": "int1",
    "max_wait_ms": "num0",
    "dispatch_threshold": "num0",
}
_PRESET_KEYS = {
    "policy": "policy",
    "max_num_seqs": "int1",
    "max_num_batched_tokens": "int1",
    "max_prefill_chunk_tokens": "int0",
    "shared_queue": "bool",
    "kv_cache_memory_bytes": "bytes",
    "interactive": "class",
    "batch": "class",
}


class GatesFileError(ValueError):
    """A problem in a gates file; str() is `FILE:LINE: key.path: message`."""

    def __init__(self, *, path: str, line: int | None, key_path: str, message: str) -> None:
        self.path = path
        self.line = line
        self.key_path = key_path
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return (
            f"{where}: {self.key_path}: {self.message}"
            if self.key_path
            else f"{where}: {self.message}"
        )


@dataclass(frozen=True, kw_only=True)
class Settings:
    confidence: float = 0.95
    inconclusive: str = "fail"  # what an inconclusive verdict does to the exit code
    warmup_seconds: float | None = None  # None: use load.json's window.warmup_seconds
    abort_grace_seconds: float = 30.0
    baseline_match: tuple[str, ...] = _DEFAULT_BASELINE_MATCH
    recovery_factor: float = 1.5
    recovery_window_seconds: float = 2.0


@dataclass(frozen=True, kw_only=True)
class Slos:
    """Per-request service levels a request must meet to count as goodput (seconds)."""

    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    e2e_seconds: float | None = None

    @property
    def empty(self) -> bool:
        return self.ttft_seconds is None and self.tpot_seconds is None and self.e2e_seconds is None


@dataclass(frozen=True, kw_only=True)
class Scope:
    """Allowed values per scope key; None means any."""

    profile: tuple[str, ...] | None = None
    stage: tuple[str, ...] | None = None
    priority: tuple[str, ...] | None = None
    length_class: tuple[str, ...] | None = None
    endpoint: tuple[str, ...] | None = None

    def merged(self, other: Scope) -> Scope:
        values = {k: getattr(other, k) or getattr(self, k) for k in glossary.SCOPE_KEYS}
        return Scope(**values)

    def to_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k in glossary.SCOPE_KEYS if (v := getattr(self, k)) is not None}


@dataclass(frozen=True, kw_only=True)
class Regression:
    """Fail when the value moves past the baseline by more than the ratio AND the floor."""

    max_increase_ratio: float | None = None
    max_decrease_ratio: float | None = None
    warn_ratio: float | None = None
    floor: float = 0.0  # base units of the statistic


@dataclass(frozen=True, kw_only=True)
class Gate:
    name: str
    metric: str
    statistic: str
    scope: Scope
    line: int | None
    description: str = ""
    fail: Threshold | None = None
    warn: Threshold | None = None
    monitor: bool = False
    key: bool = False
    rollback: str | None = None
    knob: str | None = None
    abort_on_fail: bool = False
    relative_to: Scope | None = None
    regression: Regression | None = None
    slos: Slos | None = None
    warmup_seconds: float | None = None
    key_lines: Mapping[str, int] = field(default_factory=dict)  # e.g. {"fail": 12}

    @property
    def unit(self) -> UnitKind:
        if self.relative_to is not None:
            return UnitKind.FACTOR
        return glossary.statistic_unit(glossary.get_metric(self.metric), self.statistic)


@dataclass(frozen=True, kw_only=True)
class GatesFile:
    path: str
    version: int
    settings: Settings
    slos: Slos
    gates: tuple[Gate, ...]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    sha256: str = ""


# --- YAML with positions -------------------------------------------------------------------


class _Located:
    """Plain data plus the line of every key path, from yaml nodes (for error messages)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: dict[str, int] = {}
        self._constructor = yaml.constructor.SafeConstructor()

    def error(self, key_path: str, message: str) -> GatesFileError:
        # A key that is absent (e.g. a missing `name`) points at its nearest present parent.
        probe, line = key_path, self.lines.get(key_path)
        while line is None and probe:
            parent = _PARENT_RE.sub("", probe)
            probe = parent if parent != probe else ""  # a top-level key's parent is the root
            line = self.lines.get(probe)
        return GatesFileError(path=self.path, line=line, key_path=key_path, message=message)

    def build(self, node: yaml.Node, key_path: str) -> Any:
        self.lines.setdefault(key_path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise self._at(key_node, key_path, "mapping keys must be plain names")
                key = str(self._constructor.construct_object(key_node))
                child = f"{key_path}.{key}" if key_path else key
                if key in result:
                    raise self._at(key_node, child, "duplicate key")
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.build(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, f"{key_path}[{i}]") for i, item in enumerate(node.value)]
        return self._constructor.construct_object(node)

    def _at(self, node: yaml.Node, key_path: str, message: str) -> GatesFileError:
        return GatesFileError(
            path=self.path, line=node.start_mark.line + 1, key_path=key_path, message=message
        )


def load(path: str | Path) -> GatesFile:
    """Read and validate a gates file; raises GatesFileError (exit 4) on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GatesFileError(
            path=str(path), line=None, key_path="", message=f"cannot read: {exc}"
        ) from None
    return loads(text, path=str(path))


def loads(text: str, *, path: str = "<gates>") -> GatesFile:
    located = _Located(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.context_mark is not None and exc.problem:
            problem += f" ({exc.context}, which began on line {exc.context_mark.line + 1})"
        raise GatesFileError(
            path=path, line=line, key_path="", message=f"YAML syntax: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise GatesFileError(path=path, line=None, key_path="", message=f"YAML: {exc}") from None
    if node is None:
        raise GatesFileError(
            path=path, line=1, key_path="", message="empty file; start with `version: 1`"
        )
    try:
        data = located.build(node, "")
    except yaml.YAMLError as exc:
        raise GatesFileError(path=path, line=None, key_path="", message=f"YAML: {exc}") from None
    parser = _Parser(located)
    return parser.file(data, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


# --- validation ----------------------------------------------------------------------------


class _Parser:
    def __init__(self, located: _Located) -> None:
        self.loc = located

    def err(self, key_path: str, message: str) -> GatesFileError:
        return self.loc.error(key_path, message)

    def mapping(self, value: Any, key_path: str, allowed: Sequence[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(key_path, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if key not in allowed:
                raise self.err(
                    f"{key_path}.{key}" if key_path else key,
                    f"unknown key {key!r} (allowed: {', '.join(allowed)})",
                )
        return value

    def number(self, value: Any, key_path: str, *, low: float, high: float = math.inf) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(key_path, f"expected a number, got {value!r}")
        if not low <= value <= high:
            raise self.err(key_path, f"must lie in [{low}, {high}], got {value}")
        return float(value)

    def boolean(self, value: Any, key_path: str) -> bool:
        if not isinstance(value, bool):
            raise self.err(key_path, f"expected true or false, got {value!r}")
        return value

    def text(self, value: Any, key_path: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(key_path, f"expected a non-empty string, got {value!r}")
        return value

    def seconds(self, value: Any, key_path: str) -> float:
        try:
            seconds = parse_quantity(value, kind=UnitKind.DURATION)
        except UnitError as exc:
            raise self.err(key_path, str(exc)) from None
        if seconds < 0:
            raise self.err(key_path, "must not be negative")
        return seconds

    def file(self, data: Any, *, sha256: str) -> GatesFile:
        top = self.mapping(
            data, "", ("version", "description", "settings", "slos", "gates", "presets", "profiles")
        )
        if "version" not in top:
            raise self.err("version", "missing `version: 1` (the gates file schema version)")
        if top["version"] != GATES_FILE_VERSION:
            raise self.err(
                "version", f"unsupported version {top['version']!r}; this batchgate reads version 1"
            )
        settings = self.settings(top.get("settings", {}), "settings")
        slos = self.slos(top.get("slos", {}), "slos")
        presets = self.presets(top.get("presets", {}), "presets")
        profiles = self.profiles(top.get("profiles", {}), "profiles")
        raw_gates = top.get("gates", [])
        if not isinstance(raw_gates, list):
            raise self.err("gates", "expected a list of gates")
        gates: list[Gate] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_gates):
            gate = self.gate(raw, f"gates[{i}]", presets=presets, slos=slos)
            if gate.name in seen:
                raise self.err(f"gates[{i}].name", f"duplicate gate name {gate.name!r}")
            seen.add(gate.name)
            gates.append(gate)
        return GatesFile(
            path=self.loc.path,
            version=GATES_FILE_VERSION,
            settings=settings,
            slos=slos,
            gates=tuple(gates),
            presets=presets,
            profiles=profiles,
            sha256=sha256,
        )

    def settings(self, raw: Any, kp: str) -> Settings:
        keys = (
            "confidence",
            "inconclusive",
            "warmup_seconds",
            "abort_grace_seconds",
            "baseline_match",
            "recovery_factor",
            "recovery_window_seconds",
        )
        raw = self.mapping(raw, kp, keys)
        values: dict[str, Any] = {}
        if "confidence" in raw:
            values["confidence"] = self.number(
                raw["confidence"], f"{kp}.confidence", low=0.5, high=0.9999
            )
        if "inconclusive" in raw:
            if raw["inconclusive"] not in ("pass", "fail"):
                raise self.err(f"{kp}.inconclusive", "must be `pass` or `fail`")
            values["inconclusive"] = raw["inconclusive"]
        for key in ("warmup_seconds", "abort_grace_seconds", "recovery_window_seconds"):
            if key in raw:
                values[key] = self.seconds(raw[key], f"{kp}.{key}")
        if "recovery_factor" in raw:
            values["recovery_factor"] = self.number(
                raw["recovery_factor"], f"{kp}.recovery_factor", low=1.0
            )
        if "baseline_match" in raw:
            match = raw["baseline_match"]
            if not isinstance(match, list) or any(m not in BASELINE_MATCH_FIELDS for m in match):
                raise self.err(
                    f"{kp}.baseline_match", f"a list drawn from {', '.join(BASELINE_MATCH_FIELDS)}"
                )
            values["baseline_match"] = tuple(match)
        return Settings(**values)

    def slos(self, raw: Any, kp: str) -> Slos:
        raw = self.mapping(raw, kp, ("ttft", "tpot", "e2e"))
        return Slos(**{f"{k}_seconds": self.seconds(v, f"{kp}.{k}") for k, v in raw.items()})

    def presets(self, raw: Any, kp: str) -> dict[str, dict[str, Any]]:
        raw = self.mapping(raw, kp, tuple(raw) if isinstance(raw, dict) else ())
        presets: dict[str, dict[str, Any]] = {}
        for name, body in raw.items():
            if not _NAME_RE.match(str(name)):
                raise self.err(f"{kp}.{name}", "preset names use letters, digits, _ . -")
            body = self.mapping(body, f"{kp}.{name}", tuple(_PRESET_KEYS))
            presets[str(name)] = {
                k: self.preset_value(v, _PRESET_KEYS[k], f"{kp}.{name}.{k}")
                for k, v in body.items()
            }
        return presets

    def preset_value(self, value: Any, kind: str, kp: str) -> Any:
        if kind == "policy":
            if value not in _POLICIES:
                raise self.err(kp, f"policy must be one of {', '.join(_POLICIES)}")
            return value
        if kind == "bool":
            return self.boolean(value, kp)
        if kind == "bytes":
            try:
                size = parse_quantity(value, kind=UnitKind.BYTES)
            except UnitError as exc:
                raise self.err(kp, str(exc)) from None
            if size <= 0:
                raise self.err(kp, "must be positive")
            return int(size)
        if kind == "class":
            body = self.mapping(value, kp, tuple(_CLASS_KEYS))
            return {k: self.preset_value(v, _CLASS_KEYS[k], f"{kp}.{k}") for k, v in body.items()}
        if kind in ("int0", "int1"):
            if isinstance(value, bool) or not isinstance(value, int) or value < int(kind[-1]):
                raise self.err(kp, f"expected an integer >= {kind[-1]}, got {value!r}")
            return value
        number = self.number(value, kp, low=0.0)
        return int(number) if float(number).is_integer() and isinstance(value, int) else number

    def profiles(self, raw: Any, kp: str) -> dict[str, dict[str, Any]]:
        raw = self.mapping(raw, kp, tuple(raw) if isinstance(raw, dict) else ())
        for name, body in raw.items():
            if not isinstance(body, dict):
                raise self.err(f"{kp}.{name}", "expected a mapping of profile parameter overrides")
        return {str(k): dict(v) for k, v in raw.items()}

    def scope(self, raw: Any, kp: str, *, allowed: frozenset[str], metric: str) -> Scope:
        raw = self.mapping(raw, kp, glossary.SCOPE_KEYS)
        values: dict[str, tuple[str, ...]] = {}
        for key, value in raw.items():
            if key not in allowed:
                raise self.err(
                    f"{kp}.{key}",
                    f"metric {metric!r} cannot be scoped by {key} "
                    f"(it takes: {', '.join(sorted(allowed))})",
                )
            items = value if isinstance(value, list) else [value]
            if not items or any(not isinstance(v, str) or not v for v in items):
                raise self.err(f"{kp}.{key}", "expected a name or a list of names")
            values[key] = tuple(items)
        return Scope(**values)

    def gate(self, raw: Any, kp: str, *, presets: Mapping[str, Any], slos: Slos) -> Gate:
        keys = (
            "name",
            "description",
            "source",
            "metric",
            "statistic",
            "scope",
            "fail",
            "warn",
            "monitor",
            "key",
            "rollback",
            "knob",
            "abort_on_fail",
            "relative_to",
            "baseline",
            "slos",
            "warmup_seconds",
        )
        raw = self.mapping(raw, kp, keys)
        if "name" not in raw:
            raise self.err(kp, "every gate needs a `name`")
        name = self.text(raw["name"], f"{kp}.name")
        if not _NAME_RE.match(name):
            raise self.err(f"{kp}.name", "gate names use letters, digits, _ . -")
        if "metric" not in raw:
            raise self.err(kp, "every gate needs a `metric` (a glossary name)")
        try:
            metric = glossary.get_metric(self.text(raw["metric"], f"{kp}.metric"))
        except glossary.UnknownMetricError as exc:
            raise self.err(f"{kp}.metric", str(exc)) from None
        if "source" in raw and raw["source"] != metric.source.value:
            raise self.err(
                f"{kp}.source",
                f"metric {metric.name!r} is measured on the "
                f"{metric.source.value} side, not {raw['source']!r}",
            )
        statistic = raw.get("statistic", metric.default_statistic)
        if statistic is None:
            raise self.err(
                kp, f"metric {metric.name!r} needs a `statistic` ({', '.join(metric.statistics)})"
            )
        if statistic not in metric.statistics:
            hint = "unknown statistic" if statistic not in glossary.STATISTICS else "does not fit"
            raise self.err(
                f"{kp}.statistic",
                f"{hint}: {statistic!r} for metric {metric.name!r}; "
                f"use one of {', '.join(metric.statistics)}",
            )
        scope = self.scope(
            raw.get("scope", {}), f"{kp}.scope", allowed=metric.scopes, metric=metric.name
        )
        relative_to = None
        if "relative_to" in raw:
            relative_to = self.relative(
                raw["relative_to"], f"{kp}.relative_to", metric, statistic, scope
            )
        regression = None
        if "baseline" in raw:
            regression = self.regression(raw["baseline"], f"{kp}.baseline", metric, statistic)
            if relative_to is not None:
                raise self.err(
                    f"{kp}.baseline", "a gate compares to a baseline or to another scope, not both"
                )
        unit = (
            UnitKind.FACTOR
            if relative_to is not None
            else glossary.statistic_unit(metric, statistic)
        )
        thresholds: dict[str, Threshold] = {}
        for level in ("fail", "warn"):
            if level in raw:
                if regression is not None:
                    raise self.err(
                        f"{kp}.{level}",
                        "a baseline gate takes its limit from `baseline:`; "
                        "put absolute thresholds in a separate gate",
                    )
                try:
                    thresholds[level] = parse_threshold(raw[level], kind=unit)
                except UnitError as exc:
                    raise self.err(f"{kp}.{level}", str(exc)) from None
                if thresholds[level].of_total and statistic not in ("peak", "mean", "final"):
                    raise self.err(f"{kp}.{level}", "a % of device total fits only peak/mean/final")
        monitor = self.boolean(raw.get("monitor", False), f"{kp}.monitor")
        if not thresholds and regression is None and not monitor:
            raise self.err(
                kp, "a gate needs `fail:` and/or `warn:` (or `baseline:`), or `monitor: true`"
            )
        if (
            "fail" in thresholds
            and "warn" in thresholds
            and thresholds["fail"].op != thresholds["warn"].op
        ):
            raise self.err(f"{kp}.warn", "warn and fail must use the same comparison")
        gate_slos = self.slos(raw["slos"], f"{kp}.slos") if "slos" in raw else None
        if metric.name == "goodput" and (gate_slos or slos).empty:
            raise self.err(
                kp, "goodput needs per-request SLOs: top-level `slos:` or the gate's `slos:`"
            )
        if gate_slos is not None and metric.name != "goodput":
            raise self.err(f"{kp}.slos", "`slos:` belongs to goodput gates only")
        rollback = None
        if "rollback" in raw:
            rollback = self.text(raw["rollback"], f"{kp}.rollback")
            if rollback not in presets:
                known = ", ".join(presets) or "none defined"
                raise self.err(f"{kp}.rollback", f"unknown preset {rollback!r} (presets: {known})")
        abort = self.boolean(raw.get("abort_on_fail", False), f"{kp}.abort_on_fail")
        if abort and ("fail" not in thresholds or monitor):
            raise self.err(
                f"{kp}.abort_on_fail", "needs a `fail:` threshold on a gate that is not a monitor"
            )
        warmup = (
            self.seconds(raw["warmup_seconds"], f"{kp}.warmup_seconds")
            if "warmup_seconds" in raw
            else None
        )
        knob = self.text(raw["knob"], f"{kp}.knob") if "knob" in raw else None
        description = str(raw.get("description", ""))
        key = self.boolean(raw.get("key", False), f"{kp}.key")
        return Gate(
            name=name,
            metric=metric.name,
            statistic=statistic,
            scope=scope,
            line=self.loc.lines.get(kp),
            description=description,
            fail=thresholds.get("fail"),
            warn=thresholds.get("warn"),
            monitor=monitor,
            key=key,
            rollback=rollback,
            knob=knob,
            abort_on_fail=abort,
            relative_to=relative_to,
            regression=regression,
            slos=gate_slos,
            warmup_seconds=warmup,
            key_lines={
                k: self.loc.lines[f"{kp}.{k}"] for k in raw if f"{kp}.{k}" in self.loc.lines
            },
        )

    def relative(
        self, raw: Any, kp: str, metric: glossary.Metric, statistic: str, scope: Scope
    ) -> Scope:
        if metric.shape is not Shape.SAMPLES or metric.histogram is not None:
            raise self.err(
                kp, f"ratio gates compare client sample metrics; {metric.name!r} is not one"
            )
        if statistic not in PERCENTILES and statistic != "mean":
            raise self.err(
                kp, f"ratio gates need a percentile or mean statistic, not {statistic!r}"
            )
        raw = self.mapping(raw, kp, ("scope",))
        if "scope" not in raw:
            raise self.err(kp, "relative_to needs `scope:` naming the reference scope")
        reference = scope.merged(
            self.scope(raw["scope"], f"{kp}.scope", allowed=metric.scopes, metric=metric.name)
        )
        if reference == scope:
            raise self.err(f"{kp}.scope", "the reference scope is the same as the gate's scope")
        return reference

    def regression(self, raw: Any, kp: str, metric: glossary.Metric, statistic: str) -> Regression:
        raw = self.mapping(raw, kp, ("max_increase", "max_decrease", "warn_change", "floor"))
        if ("max_increase" in raw) == ("max_decrease" in raw):
            raise self.err(kp, "give exactly one of `max_increase` or `max_decrease` (e.g. 10%)")
        unit = glossary.statistic_unit(metric, statistic)
        values: dict[str, Any] = {}
        targets = {
            "max_increase": "max_increase_ratio",
            "max_decrease": "max_decrease_ratio",
            "warn_change": "warn_ratio",
        }
        for key, target in targets.items():
            if key in raw:
                try:
                    values[target] = parse_quantity(raw[key], kind=UnitKind.RATIO)
                except UnitError as exc:
                    raise self.err(f"{kp}.{key}", str(exc)) from None
        if "floor" in raw:
            try:
                values["floor"] = parse_quantity(raw["floor"], kind=unit)
            except UnitError as exc:
                raise self.err(f"{kp}.floor", str(exc)) from None
        return Regression(**values)


def validate_against_buckets(
    gates_file: GatesFile, bucket_bounds: Mapping[str, Sequence[float]]
) -> None:
    """Raise GatesFileError for a histogram-judged threshold that is not a bucket bound.

    `bucket_bounds` maps a glossary histogram name (e.g. `step_duration_seconds`) to the `le`
    bounds the target exposes. Call it once the target has been scraped, for the histograms the
    run will judge from (for the bundled server, step latency is exact and needs no call).
    """
    for index, gate in enumerate(gates_file.gates):
        metric = glossary.get_metric(gate.metric)
        if metric.histogram is None or metric.histogram not in bucket_bounds:
            continue
        if gate.statistic not in PERCENTILES:
            continue
        bounds = sorted(
            float(b) for b in bucket_bounds[metric.histogram] if math.isfinite(float(b))
        )
        for level in ("fail", "warn"):
            threshold = getattr(gate, level)
            if threshold is None:
                continue
            if not any(
                math.isclose(threshold.value, b, rel_tol=1e-9, abs_tol=1e-12) for b in bounds
            ):
                shown = ", ".join(f"{b:g}" for b in bounds) or "none"
                raise GatesFileError(
                    path=gates_file.path,
                    line=gate.key_lines.get(level, gate.line),
                    key_path=f"gates[{index}].{level}",
                    message=(
                        f"the target's {metric.histogram} histogram cannot resolve "
                        f"{threshold.text!r}: "
                        f"thresholds must be one of its bucket bounds (seconds: {shown})"
                    ),
                )
