"""A whole run: target up, one session per profile, target down, evaluation and every output.

Owns the order of a run (docs/architecture.md): start the bundled server with the preset's flags (or
apply the preset live to a `--target`), look at the target once (model, batching, histogram
buckets: `validate_against_buckets`), write `manifest.json`, run each profile's session, stop
every child on every path (Ctrl-C and SIGTERM included; a second Ctrl-C during cleanup is
ignored until the children are gone) — or stop after the profile an `abort_on_fail` gate
stopped (manifest `ended: aborted`, later profiles not run) — then evaluate and write
verdicts.json, junit.xml, summary.md and report.html (`gate.orchestrator.run_judgement`). It
returns a `RunResult`; printing and the exit code are the command's business
(`gate.commands.run`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import signal
import threading
from typing import Any

from gate.calibration.content import Calibration
from gate.errors import ExitCode, UsageError
from gate.gates.file import packaged_gates_path, validate_against_buckets
from gate.orchestrator.bundled_server import BundledServer, start_bundled_server
from gate.orchestrator.calibration import CalibrationFault
from gate.orchestrator.calibration_phase import CalibrationPhase
from gate.orchestrator.capabilities import unmeasurable_reason
from gate.orchestrator.faults import (
    FAULT_EXIT_CODE,
    RunFault,
    Terminated,
    terminate_as_exception,
    write_failure,
)
from gate.orchestrator.live import LiveView
from gate.orchestrator.live_preset import apply_live_preset, restore_settings
from gate.orchestrator.load_workers import AUTO, auto_entry, auto_message, auto_workers
from gate.orchestrator.manifest import Manifest
from gate.orchestrator.preset_flags import server_flags
from gate.orchestrator.processes import ChildProcess, ProcessError
from gate.orchestrator.request_fields import refused_line
from gate.orchestrator.restore_guard import RestoreGuard
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.run_judgement import abort_message, judge
from gate.orchestrator.session import ProfileSession, SessionSettings
from gate.orchestrator.suite import Suite, orphaned_profiles, select_suite
from gate.orchestrator.target import TargetClient, TargetError, TargetInfo
from gate.rundir.abort import AbortRecord

__all__ = ["execute", "new_run_id"]


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def _bucket_bounds(info: TargetInfo) -> dict[str, list[float]]:
    bounds = dict(info.bucket_bounds)
    if info.has_step_records:
        # Step latency is judged from exact step records here, not from the histogram.
        bounds.pop("step_duration_seconds", None)
    return bounds


class _Run:
    def __init__(self, config: RunConfig, view: LiveView, suite: Suite) -> None:
        self.config = config
        self.view = view
        self.suite = suite
        self.server: BundledServer | None = None
        self.children: list[ChildProcess] = []
        self.client: TargetClient | None = None
        self.info: TargetInfo | None = None
        self.restore: tuple[str, dict[str, Any]] | None = None
        self.guard: RestoreGuard | None = None  # restores `restore` if batchgate is killed
        self.aborted: AbortRecord | None = None
        self.plans = config.plans
        self.calibration: Calibration | None = None
        self.manifest = Manifest(
            path=config.run_dir / "manifest.json",
            gates_file=str(suite.path.resolve()),
            gates_hash=suite.gates_file.sha256,
            scale=config.scale,
            preset=config.preset_name,
        )
        # Replaced when the run ends; if it stays, batchgate could not say how the run ended.
        self.manifest.reason = (
            "not finished: the run is still going, or batchgate could not record how it ended "
            "(killed, crashed, or the run directory could not be written)"
        )
        self.manifest.extra["server_args"] = list(config.server_args)
        self.manifest.extra["gates_source"] = suite.source
        self.manifest.extra["gates_skipped"] = list(suite.skipped)

    def setup(self) -> None:
        c = self.config
        if c.attached_server is not None:
            self.server = c.attached_server
            url = self.server.url
        elif c.target_url is None:
            self.view.message("batchgate: starting the bundled reference server")
            options = dataclasses.replace(
                c.server_options,
                preset_flags=tuple(server_flags(c.preset or {})),
                extra_args=c.server_args,
            )
            try:
                self.server = start_bundled_server(c.run_dir, options)
            except ProcessError as exc:
                raise UsageError(
                    f"the bundled server did not start: {exc}", ExitCode.NO_DATA
                ) from exc
            self.children.append(self.server.child)
            url = self.server.url
        else:
            url = c.target_url
        self.client = TargetClient(url, api_key=c.api_key, admin_token=c.admin_token)
        try:
            self.info = self.client.info()
        except TargetError as exc:
            raise UsageError(f"target not usable: {exc}", ExitCode.NO_DATA) from exc
        self._drop_unmeasurable()
        # Raises GatesFileError (exit 4) before any load when a histogram cannot resolve a gate.
        validate_against_buckets(self.suite.gates_file, _bucket_bounds(self.info))
        self.manifest.target = self.info.to_manifest()
        self.manifest.write()

    def _drop_unmeasurable(self) -> None:
        """Say what the target is; leave out of the packaged default suite what it cannot
        measure (a user's own gates stay: they are judged "no data", never pass)."""
        assert self.info is not None
        info = self.info
        self.view.message(
            f"batchgate: target kind {info.server_kind}"
            + ("" if info.has_metrics else " (no /metrics: server-side gates not measurable)")
            + (", exact step records" if info.has_step_records else "")
        )
        if info.refused_fields:
            assert info.fields is not None
            self.view.message(refused_line(info.refused_fields, info.fields.status))
        unmeasurable = {
            g.name: why
            for g in self.suite.gates_file.gates
            if (why := unmeasurable_reason(g, info)) is not None
        }
        self.manifest.extra["gates_not_measurable"] = unmeasurable
        if not unmeasurable or self.suite.source != str(packaged_gates_path()):
            return
        c = self.config
        self.suite = select_suite(
            c.gates_file,
            c.gates_text,
            [p.name for p in c.plans],
            c.run_dir,
            unmeasurable=unmeasurable,
        )
        self.manifest.gates_hash = self.suite.gates_file.sha256
        self.manifest.extra["gates_skipped"] = list(self.suite.skipped)
        for name, why in unmeasurable.items():
            self.view.message(f"batchgate: left out {name}: {why}")
        orphaned = orphaned_profiles(c.gates_file, self.suite.gates_file)
        if orphaned:
            # Load that no gate would look at: not sent (a foreign target's time is not free).
            self.plans = tuple(p for p in self.plans if p.name not in orphaned)
            self.manifest.extra["profiles_left_out"] = {
                name: "every gate on it is not measurable on this target" for name in orphaned
            }
            for name in orphaned:
                self.view.message(f"batchgate: profile {name} not run: no gate on it is measurable")

    def _apply_live_preset(self, url: str) -> None:
        c = self.config
        assert c.preset is not None and c.preset_name is not None
        previous = apply_live_preset(url, c.preset_name, c.preset, admin_token=c.admin_token)
        # What the target ran before, so it can be put back (and is never lost).
        self.manifest.extra["replaced_settings"] = previous
        if c.keep_preset:
            self.view.message(f"batchgate: applied preset {c.preset_name!r} to {url} (kept)")
            return
        self.restore = (url, previous)
        self.guard = RestoreGuard.start(c.run_dir, url, previous, admin_token=c.admin_token)
        self.view.message(
            f"batchgate: applied preset {c.preset_name!r} to {url}; its previous settings "
            "are restored at the end (--keep-preset keeps the preset)"
        )

    def _session_settings(self) -> SessionSettings:
        c = self.config
        auto = c.load_workers == AUTO
        settings = c.session or SessionSettings(
            scale=c.scale,
            api_key=c.api_key,
            admin_token=c.admin_token,
            load_workers=1 if auto else int(c.load_workers),
        )
        settings = auto_workers(settings, self.calibration) if auto else settings
        refused = () if self.info is None else self.info.refused_fields
        return dataclasses.replace(settings, drop_fields=refused) if refused else settings

    def calibrate(self) -> None:
        """The calibration phase (docs/calibration.md): measure or reuse, then resolve the
        profiles written relative to the target."""
        c = self.config
        assert self.client is not None and self.info is not None
        phase = CalibrationPhase(
            mode=c.calibration,
            spec=c.calibration_spec,
            store_dir=c.calibration_store,
            run_dir=c.run_dir,
            gates_file=self.suite.gates_file,
            preset=c.preset,
            bundled=self.server is not None,
            admin_token=c.admin_token,
            scale=c.scale,
            view=self.view,
        )
        result = phase.run(
            plans=self.plans,
            target=self.client,
            info=self.info,
            server=None if self.server is None else self.server.child,
            settings=self._session_settings(),
            children=self.children,
            hardware=self.manifest.hardware,
        )
        if c.target_url is not None and c.preset is not None and not c.calibrate_only:
            # After calibrating: "unloaded" is the target as it was, not the preset under test.
            self._apply_live_preset(self.client.url)
            self.info = dataclasses.replace(self.info, batching=self.client.batching())
            self.manifest.target = self.info.to_manifest()
        if result is None:
            self.manifest.write()
            return
        self.calibration, self.plans = result.calibration, result.plans
        self.manifest.extra["calibration"] = result.manifest_entry
        if result.relative_profiles:
            self.manifest.extra["relative_profiles"] = result.relative_profiles
        self.manifest.write()

    def profiles(self) -> RunFault | None:
        c = self.config
        assert self.client is not None and self.info is not None
        settings = self._session_settings()
        if c.load_workers == AUTO:
            self.manifest.extra["load_workers"] = auto_entry(settings)
            self.view.message(auto_message(settings))
        for index, plan in enumerate(self.plans, start=1):
            session = ProfileSession(
                plan=plan,
                run_dir=c.run_dir,
                target=self.client,
                server=None if self.server is None else self.server.child,
                has_step_records=self.info.has_step_records,
                settings=settings,
                view=self.view,
                index=index,
                total=len(self.plans),
                children=self.children,
                gates_file=self.suite.gates_file,
            )
            outcome = session.run()
            self.manifest.add_profile(plan.name, outcome.load, plan.overrides)
            self.manifest.observers[plan.name] = outcome.observers
            if outcome.aborted is not None:
                # The run is doomed (a gate failed for sure): the later profiles are not run.
                self.aborted = outcome.aborted
                self.manifest.profiles[plan.name]["aborted_by_gate"] = outcome.aborted.gate
                self.manifest.extra["profiles_not_run"] = [p.name for p in self.plans[index:]]
            self.manifest.write()
            if outcome.fault is not None:
                return outcome.fault
            if outcome.aborted is not None:
                return None
        return None

    def _restore_settings(self, url: str, settings: dict[str, Any]) -> None:
        self.view.message(restore_settings(url, settings, admin_token=self.config.admin_token))

    def cleanup(self) -> None:
        """Stop every child; a Ctrl-C now would leave strays, so it waits until this is done."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            for child in reversed(self.children):
                if child.alive:
                    child.stop(timeout_seconds=self.config.server_options.stop_timeout_seconds)
                else:
                    child.stop(timeout_seconds=1.0)
            if self.restore is not None:
                self._restore_settings(*self.restore)
            if self.guard is not None:
                self.guard.release()
            if self.client is not None:
                self.client.close()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def execute(config: RunConfig, view: LiveView) -> RunResult:
    """Run everything; raises UsageError (or GatesFileError) when it could not start."""
    suite = select_suite(
        config.gates_file, config.gates_text, [p.name for p in config.plans], config.run_dir
    )
    run = _Run(config, view, suite)
    fault: RunFault | None = None
    finished = False
    try:
        with terminate_as_exception():
            try:
                run.setup()
                try:
                    run.calibrate()
                except CalibrationFault as exc:
                    fault = exc.fault
                if fault is None and not config.calibrate_only:
                    fault = run.profiles()
            except (KeyboardInterrupt, Terminated) as exc:
                what = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else str(exc)
                fault = RunFault(ended="interrupted", reason=f"stopped by the user ({what})")
            except ProcessError as exc:  # the load generator could not even start
                fault = RunFault(ended="load_crashed", reason=str(exc))
            except OSError as exc:  # a full disk: a fault of the run, never a traceback
                fault = write_failure(exc)
                if fault is None:
                    raise
        finished = True
    finally:
        run.cleanup()
        if run.info is not None:  # measurement started: the manifest says how it ended
            if not finished and fault is None:
                # An unexpected error is on its way out: never leave "completed" behind.
                fault = RunFault(ended="interrupted", reason="batchgate stopped on an error")
            if fault is not None:
                run.manifest.finish(fault.ended, fault.message)
            elif run.aborted is not None:
                run.manifest.finish("aborted", abort_message(run.aborted))
            else:
                run.manifest.finish("completed", None)
            unwritten = _write_manifest(run.manifest)
            if unwritten is not None and fault is None:
                fault = unwritten
    if config.calibrate_only:
        return RunResult(
            run_dir=config.run_dir,
            exit_code=FAULT_EXIT_CODE
            if fault is not None or run.calibration is None
            else ExitCode.PASSED,
            fault=fault,
            evaluation=None,
            target=run.info,
        )
    if run.info is None and fault is not None:
        return RunResult(
            run_dir=config.run_dir,
            exit_code=FAULT_EXIT_CODE,
            fault=fault,
            evaluation=None,
            target=None,
            notes=("interrupted before any load",),
        )
    return judge(config, suite=run.suite, info=run.info, aborted=run.aborted, fault=fault)


def _write_manifest(manifest: Manifest) -> RunFault | None:
    """Write the manifest; on a full disk, the fault instead of a traceback (and no half-written
    temporary file left behind)."""
    try:
        manifest.write()
    except OSError as exc:
        manifest.path.with_name(manifest.path.name + ".tmp").unlink(missing_ok=True)
        fault = write_failure(exc)
        if fault is None:
            raise
        return fault
    return None
