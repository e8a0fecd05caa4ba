"""The gates.yaml language (version 1): loading and validating a gates file into value objects.

Owns the file's schema: `version`, `settings`, `slos`, `gates`, `presets`, `profiles`; every
problem (YAML syntax, unknown keys, unknown metrics, a statistic that does not fit, a threshold
without a needed unit, a rollback naming no preset) is a GatesFileError naming file, line and
key path, raised before any load runs. `validate_against_buckets` adds the one check that needs
the target: histogram thresholds must fall on a bucket bound. It does not know how gates are
evaluated (`gate.verdicts.evaluate`) or what the units mean beyond parsing (`gate.units`). The
parts live next door: YAML positions and key-path errors (`gate.gates.reader`), the value objects
(`gate.gates.spec`), one gate entry (`gate.gates.definition`), presets (`gate.gates.preset_schema`);
this module assembles the file.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from gate import glossary
from gate.gates.definition import GateReader
from gate.gates.preset_schema import PresetReader
from gate.gates.reader import GatesFileError, compose
from gate.gates.spec import (
    BASELINE_MATCH_FIELDS,
    Gate,
    GatesFile,
    Settings,
)
from gate.glossary import PERCENTILES

__all__ = [
    "GATES_FILE_VERSION",
    "load",
    "loads",
    "packaged_gates_path",
    "validate_against_buckets",
]

GATES_FILE_VERSION = 1


def packaged_gates_path() -> Path:
    """The default gates file shipped inside the package (gate/gates/default.yaml)."""
    return Path(str(resources.files("gate.gates").joinpath("default.yaml")))


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
    data, located = compose(text, path=path)
    parser = _Parser(located)
    return parser.file(data, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


class _Parser(GateReader, PresetReader):
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
