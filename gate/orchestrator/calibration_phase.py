"""The calibration phase of a run: whether to calibrate, measure or reuse, and what follows.

Owns the decision (`--calibration fresh|auto|off|FILE`), the reuse of a saved calibration of the
same target (server kind, model, batching settings hash, start flags, hardware, calibration spec:
`identity_key`) from a store directory (only a calibration whose client phases were valid
measurements is saved or reused), switching a failure preset's live knobs to the reference
preset while measuring on the bundled server (so "unloaded" is what the reference settings give a
lone request), and resolving the profiles written relative to the target into absolute numbers,
validated again by the load generator. It does not measure (`gate.orchestrator.calibration`)
nor read or write calibration.json itself (`gate.calibration`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gate.calibration.content import CALIBRATION_FILE, Calibration, CalibrationError
from gate.calibration.json_io import read_calibration, write_calibration
from gate.calibration.procedure import CalibrationSpec
from gate.calibration.references import invalid_phases
from gate.errors import ExitCode, UsageError
from gate.gates.spec import GatesFile
from gate.orchestrator.calibration import calibrate
from gate.orchestrator.consistency_probes import answer_alone
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import ProfilePlan, resolve_plans
from gate.orchestrator.preset_flags import REFERENCE_PRESET, live_settings, server_flags
from gate.orchestrator.processes import ChildProcess
from gate.orchestrator.relative import RelativeError, absolute_overrides
from gate.orchestrator.session import SessionSettings
from gate.orchestrator.target import TargetClient, TargetInfo

__all__ = ["CalibrationPhase", "PhaseResult", "identity_key"]

MODES = ("fresh", "auto", "off")
# What a user can do about a phase whose load generator measured itself.
_REMEDY = (
    ". A target faster than one load-generator process can drive needs more of them"
    " (--workers N); a busy machine, a quieter moment"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PhaseResult:
    calibration: Calibration
    plans: tuple[ProfilePlan, ...]
    manifest_entry: dict[str, Any]
    relative_profiles: dict[str, Any]


def identity_key(identity: Mapping[str, Any]) -> str:
    """A stable hash of what a calibration is valid for (the URL's port is not part of it)."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass(kw_only=True)
class CalibrationPhase:
    mode: str
    spec: CalibrationSpec
    store_dir: Path
    run_dir: Path
    gates_file: GatesFile
    preset: Mapping[str, Any] | None
    bundled: bool
    admin_token: str | None
    scale: str
    view: LiveView

    def run(
        self,
        *,
        plans: Sequence[ProfilePlan],
        target: TargetClient,
        info: TargetInfo,
        server: ChildProcess | None,
        settings: SessionSettings,
        children: list[ChildProcess],
        hardware: Mapping[str, Any],
    ) -> PhaseResult | None:
        if self.mode == "off":
            if any(p.relative for p in plans):
                raise UsageError(
                    "profiles are sized relative to the target but --calibration is off",
                    ExitCode.USAGE,
                )
            return None
        identity = self._identity(info, hardware)
        key = identity_key(identity)
        data, source = None, self.mode
        if self.mode == "auto":
            data = self._saved(key)
            source = "auto: reused" if data is not None else "auto: measured"
        elif self.mode != "fresh":
            data = read_calibration(Path(self.mode))
            source = f"file: {self.mode}"
        if data is None:
            data = self._measure(target, info, server, settings, children, identity)
            if self.mode == "auto":
                problems = invalid_phases(data)
                if problems:
                    # Reused, it would stop every later run the same way (or leave its
                    # relative gates without data) until someone asked for a fresh one.
                    self.view.message(
                        f"batchgate: calibration not saved for reuse: {'; '.join(problems)}"
                    )
                else:
                    self._save(key, data)
        else:
            self.view.message(f"batchgate: reusing a calibration ({source})")
        data = data.with_source(source)
        write_calibration(self.run_dir / CALIBRATION_FILE, data)
        resolved, relative_profiles = self._resolve(plans, data)
        # The consistency probes' answers alone, under the run's own settings (issue 39).
        problem = answer_alone(
            run_dir=self.run_dir, gates_file=self.gates_file, target=target, server=server,
            has_step_records=info.has_step_records, settings=settings, view=self.view,
            children=children,
        )  # fmt: skip
        if problem is not None:
            self.view.message(f"batchgate: {problem}")
        entry = {
            "source": source,
            "identity_key": key,
            **data.as_written(
                "unloaded", "capacity", "capacity_sweep", "kv_capacity", "took_seconds"
            ),
        }
        return PhaseResult(
            calibration=data,
            plans=resolved,
            manifest_entry=entry,
            relative_profiles=relative_profiles,
        )

    def _identity(self, info: TargetInfo, hardware: Mapping[str, Any]) -> dict[str, Any]:
        target = info.to_manifest()
        return {
            "server_kind": target.get("server_kind"),
            "model": target.get("model"),
            # The bundled server's start flags (KV size) and live settings; a foreign server's
            # URL stands in for what we cannot see of its settings.
            "batching_hash": target.get("batching_hash"),
            "start_flags": server_flags(self.preset or {}) if self.bundled else None,
            "url": None if self.bundled else target.get("url"),
            "hardware": {k: hardware.get(k) for k in ("cpu", "cpu_count", "gpu", "driver")},
            "spec": dataclasses.asdict(self.spec),
        }

    def _saved(self, key: str) -> Calibration | None:
        path = self.store_dir / f"{key}.json"
        if not path.is_file():
            return None
        try:
            data = read_calibration(path)
        except CalibrationError:
            return None  # an unreadable store entry is measured afresh and replaced
        problems = invalid_phases(data)
        if problems:  # saved before invalid measurements were refused: measured afresh
            self.view.message(f"batchgate: saved calibration not reused: {'; '.join(problems)}")
            return None
        return data

    def _save(self, key: str, data: Calibration) -> None:
        try:
            self.store_dir.mkdir(parents=True, exist_ok=True)
            write_calibration(self.store_dir / f"{key}.json", data)
        except OSError as exc:
            self.view.message(f"batchgate: could not save the calibration: {exc}")

    def _measure(
        self,
        target: TargetClient,
        info: TargetInfo,
        server: ChildProcess | None,
        settings: SessionSettings,
        children: list[ChildProcess],
        identity: dict[str, Any],
    ) -> Calibration:
        reference = self.gates_file.presets.get(REFERENCE_PRESET)
        swap = (
            self.bundled
            and self.preset is not None
            and reference is not None
            and bool(live_settings(self.preset))
        )
        if swap:
            self._apply(target, live_settings(reference))
        try:
            return calibrate(
                spec=self.spec,
                run_dir=self.run_dir,
                gates_file=self.gates_file,
                target=target,
                server=server,
                has_step_records=info.has_step_records,
                settings=settings,
                view=self.view,
                children=children,
                identity={**identity, "reference_preset": REFERENCE_PRESET if swap else None},
            )
        finally:
            if swap:
                assert self.preset is not None
                self._apply(target, live_settings(self.preset))

    def _apply(self, target: TargetClient, settings: dict[str, Any]) -> None:
        from gate.rollback.live import RollbackError, apply_preset

        try:
            apply_preset(target.url, settings, admin_token=self.admin_token)
        except RollbackError as exc:
            raise UsageError(
                f"cannot change the batching settings for calibration: {exc}", ExitCode.NO_DATA
            ) from exc

    def _resolve(
        self, plans: Sequence[ProfilePlan], calibration: Calibration
    ) -> tuple[tuple[ProfilePlan, ...], dict[str, Any]]:
        relative = [p for p in plans if p.relative]
        if not relative:
            return tuple(plans), {}
        absolute = {}
        for p in relative:
            try:
                absolute[p.name] = absolute_overrides(
                    p.overrides, p.relative, p.params, calibration
                )
            except RelativeError as exc:
                # Only for a load generator that measured itself, not a malformed record.
                hint = _REMEDY if "not a valid measurement" in str(exc) else ""
                raise UsageError(f"profile {p.name!r}: {exc}{hint}", exc.exit_code) from None
        # Validated again by the load generator, now with the numbers it will run.
        empty = dataclasses.replace(self.gates_file, profiles={})
        resolved = {
            p.name: p
            for p in resolve_plans(
                list(absolute), empty, scale=self.scale, extra_overrides=absolute
            )
        }
        out = tuple(
            dataclasses.replace(resolved[p.name], relative=p.relative) if p.name in resolved else p
            for p in plans
        )
        entries = {
            p.name: {
                "relative": p.relative,
                "resolved": {k: resolved[p.name].overrides.get(k) for k in p.relative},
            }
            for p in relative
        }
        return out, entries
