"""Baselines: statistics of a known-good run, stored with provenance, for regression gates.

Owns the store (default `.batchgate/baselines/` under the working directory, one JSON file per
baseline), saving a run's measured statistics (every gate of a gates file plus a standard set of
client latency statistics per profile), listing, showing and loading them, and saying why a
baseline is not comparable to a run (provenance mismatch). It refuses to save a run that `check`
would call no data (a run that did not complete, a profile whose measurement was invalid: the
judge's own fail-closed reasons), and stores only finite values of measurements that have data,
so a regression gate is never judged against a figure no gate could pass on. It does not judge
(`gate.verdicts.evaluate`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.errors import BatchgateError, ExitCode
from gate.gates.spec import GatesFile, Scope, Settings, Slos
from gate.metrics import derive
from gate.metrics.measurements import NoData
from gate.rundir.run import RunData, provenance
from gate.verdicts.assess import point_value
from gate.verdicts.context import JudgeContext, measure_key

__all__ = [
    "BASELINE_SCHEMA_VERSION",
    "DEFAULT_STORE",
    "Baseline",
    "BaselineError",
    "BaselineStore",
    "InvalidBaselineRun",
]

BASELINE_SCHEMA_VERSION = 1
DEFAULT_STORE = Path(".batchgate") / "baselines"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_STANDARD = (
    ("ttft", "p50"),
    ("ttft", "p90"),
    ("ttft", "p99"),
    ("e2e", "p50"),
    ("e2e", "p90"),
    ("e2e", "p99"),
    ("itl", "p50"),
    ("itl", "p99"),
    ("tpot", "p50"),
    ("tpot", "p99"),
    ("errors", "mean"),
    ("requests", "rate"),
    ("output_tokens", "rate"),
)


class BaselineError(BatchgateError, ValueError):
    """A baseline that cannot be saved or found (the message says why)."""

    default_exit_code = ExitCode.USAGE


class InvalidBaselineRun(BaselineError):
    """A run that is no valid measurement (`check` would call it no data): not a baseline."""

    default_exit_code = ExitCode.NO_DATA


@dataclass(frozen=True, kw_only=True)
class Baseline:
    name: str
    created_at: str
    run_path: str
    provenance: dict[str, dict[str, str | None]]  # per profile
    measures: dict[str, float]

    def value(self, key: str) -> float | None:
        return self.measures.get(key)

    def mismatches(
        self, run_provenance: dict[str, str | None], fields: tuple[str, ...]
    ) -> list[str]:
        """The `fields` where the run differs from the baseline (for the run's profile)."""
        profile_hash = run_provenance.get("profile_hash")
        stored = next(
            (p for p in self.provenance.values() if p.get("profile_hash") == profile_hash), None
        )
        if stored is None:
            stored = next(iter(self.provenance.values()), {})
        problems = []
        for name in fields:
            ours, theirs = run_provenance.get(name), stored.get(name)
            if ours is None or theirs is None:
                problems.append(
                    f"{name} unknown ({'run' if ours is None else 'baseline'} does not record it)"
                )
            elif ours != theirs:
                problems.append(f"{name} differs (baseline {theirs}, run {ours})")
        return problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": BASELINE_SCHEMA_VERSION,
            "name": self.name,
            "created_at": self.created_at,
            "run_path": self.run_path,
            "provenance": self.provenance,
            "measures": self.measures,
        }


class BaselineStore:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else Path.cwd() / DEFAULT_STORE

    def _path(self, name: str) -> Path:
        if not _NAME_RE.match(name):
            raise BaselineError(f"baseline names use letters, digits, _ . - (got {name!r})")
        return self.root / f"{name}.json"

    def save(
        self,
        run: RunData,
        name: str,
        *,
        gates_file: GatesFile | None = None,
        overwrite: bool = False,
    ) -> Baseline:
        path = self._path(name)
        problems = _not_measured(run, gates_file)
        if problems:
            raise InvalidBaselineRun(
                f"{run.path} is not a valid measurement, nothing saved: " + "; ".join(problems)
            )
        if path.exists() and not overwrite:
            raise BaselineError(f"baseline {name!r} exists at {path}; pass --force to replace it")
        baseline = Baseline(
            name=name,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            run_path=str(run.path),
            provenance={p: provenance(run, p) for p in run.profiles},
            measures=_measures(run, gates_file),
        )
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            json.dumps(baseline.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        os.replace(tmp, path)
        return baseline

    def list(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json"))

    def load(self, name: str) -> Baseline:
        path = self._path(name)
        if not path.exists():
            known = ", ".join(self.list()) or "none"
            raise BaselineError(f"no baseline {name!r} in {self.root} (known: {known})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BaselineError(f"{path}: unreadable: {exc}") from None
        if not isinstance(data, dict):
            raise BaselineError(f"{path}: not a baseline (expected a JSON object)")
        if data.get("schema_version") != BASELINE_SCHEMA_VERSION:
            raise BaselineError(
                f"{path}: schema_version {data.get('schema_version')!r} is not supported"
            )
        problem = _shape_problem(data)
        if problem is not None:
            raise BaselineError(f"{path}: not a baseline: {problem}")
        return Baseline(
            name=data["name"],
            created_at=data["created_at"],
            run_path=data["run_path"],
            provenance=data["provenance"],
            measures=data["measures"],
        )

    def show(self, name: str) -> dict[str, Any]:
        return self.load(name).to_dict()


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What in a parsed baseline file does not have the shape `save` writes (None: all does):
    a hand-edited or foreign file must be refused here, not fail deep inside a comparison."""
    for key in ("name", "created_at", "run_path"):
        if not isinstance(data.get(key), str):
            return f"{key!r} must be a string"
    provenance = data.get("provenance")
    if not isinstance(provenance, dict) or not all(
        isinstance(v, dict) for v in provenance.values()
    ):
        return "'provenance' must be an object of objects"
    measures = data.get("measures")
    if not isinstance(measures, dict):
        return "'measures' must be an object"
    for key, value in measures.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"measures[{key!r}] must be a number, got {value!r}"
    return None


def _not_measured(run: RunData, gates_file: GatesFile | None) -> list[str]:
    """Why `check` would judge the run's profiles no data, one entry per profile (empty: none).
    The judge's own rule (`JudgeContext.closed_reason`), so the two never disagree. The whole
    save is refused on any: a baseline from a run that died part-way is no known-good run, and
    a partial one would silently lack the bad profile's statistics."""
    if gates_file is None:
        gates_file = GatesFile(path="", version=1, settings=Settings(), slos=Slos(), gates=())
    context = JudgeContext(run, gates_file, None, partial=False)
    if not run.profiles:
        return ["the run has no profiles"]
    problems: list[str] = []
    for name, profile in run.profiles.items():
        reason = context.closed_reason(profile, name)
        if reason is not None:
            problems.append(f"profile {name!r}: {reason}")
    return problems


def _measures(run: RunData, gates_file: GatesFile | None) -> dict[str, float]:
    settings = gates_file.settings if gates_file is not None else Settings()
    slos = gates_file.slos if gates_file is not None else Slos()
    wanted: list[tuple[str, str, str, Scope, Slos, float | None]] = []
    for profile in run.profiles:
        wanted += [(profile, metric, stat, Scope(), slos, None) for metric, stat in _STANDARD]
        for gate in gates_file.gates if gates_file is not None else ():
            if gate.scope.profile is None or profile in gate.scope.profile:
                warmup = (
                    gate.warmup_seconds
                    if gate.warmup_seconds is not None
                    else settings.warmup_seconds
                )
                wanted.append(
                    (profile, gate.metric, gate.statistic, gate.scope, gate.slos or slos, warmup)
                )
    measures: dict[str, float] = {}
    for profile, metric, statistic, scope, gate_slos, warmup in wanted:
        key = measure_key(profile, metric, statistic, scope)
        if key in measures:
            continue
        measurement = derive.measure(
            run.profiles[profile],
            metric,
            statistic,
            scope,
            slos=gate_slos,
            settings=settings,
            warmup_seconds=warmup,
        )
        if isinstance(measurement, NoData):
            continue  # no figure: a gate needing it is inconclusive, never judged against one
        value = point_value(measurement, statistic)
        if value is not None and math.isfinite(value):
            measures[key] = value
    return measures
