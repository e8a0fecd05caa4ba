"""One candidate of `batchgate tune`, measured: its settings put on the target, one run of the
profile at one rung, and what the search needs from the verdicts.

Owns the three ways a candidate reaches a target:

- **live**: a running server with `PUT /admin/batching` (the bundled one, started once, or a
  `--target`): the candidate is applied as the run's preset and the previous settings are put
  back after the run (`gate.orchestrator.live_preset`);
- **restart**: a candidate that sets a start-only key (the KV size) on the bundled server gets a
  bundled server of its own, started with those flags;
- **command**: another server, restarted for every candidate from the user's command template
  (`--server-cmd 'vllm serve m --port {port} --max-num-seqs {max_num_seqs}'`): started, waited
  for (/health or /v1/models), measured, stopped.

Every run reuses one calibration (taken once, with the reference settings), so relative gates
judge every candidate against the same reference. The objective, the throughput and the p99
latency of the trade-off figure come from monitor gates added to the gates file (same
statistics and intervals as any gate; they never change a verdict: `gate.tune.objective`). It
does not search (`gate.tune.search`).
"""

from __future__ import annotations

import dataclasses
import shlex
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.errors import ExitCode, UsageError
from gate.orchestrator.bundled_server import BundledServer
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import resolve_plans
from gate.orchestrator.preset_flags import START_ONLY_KEYS
from gate.orchestrator.processes import ProcessError, start_child, wait_for_health
from gate.orchestrator.run_config import RunConfig, RunResult
from gate.orchestrator.runner import execute
from gate.tune.candidate import Candidate, Measurement
from gate.tune.objective import LATENCY_GATE, OBJECTIVE_GATE, THROUGHPUT_GATE
from gate.tune.space import preset_of
from gate.verdicts.verdict import Status

__all__ = ["CANDIDATE_PRESET", "CandidateRunner", "command_argv", "free_port", "measurement_of"]

CANDIDATE_PRESET = "tune_candidate"


def command_argv(template: str, settings: Mapping[str, Any], port: int) -> list[str]:
    """The --server-cmd template filled in: {knob} (short or class_knob form) and {port}."""
    values: dict[str, Any] = {"port": port}
    # The short name ({max_wait_ms}) means the interactive class's, as on the command line of
    # tune; {batch_max_wait_ms} names the other.
    for path, value in sorted(settings.items(), key=lambda kv: kv[0].startswith("interactive.")):
        values[path.rsplit(".", 1)[-1]] = values[path.replace(".", "_")] = value
    try:
        return shlex.split(template.format(**values))
    except (KeyError, IndexError) as exc:
        raise UsageError(f"--server-cmd: no value for the field {exc}: add it to --knobs") from None
    except ValueError as exc:
        raise UsageError(f"--server-cmd: {exc}") from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CandidateRunner:
    """Measures a candidate at a rung: `runner(candidate, rung, scale) -> Measurement`."""

    def __init__(
        self,
        *,
        base: RunConfig,
        profile: str,
        overrides: Mapping[str, Mapping[str, Any]],
        tune_dir: Path,
        view: LiveView,
        server: BundledServer | None,
        url: str | None,
        server_cmd: str | None,
        start_preset: Mapping[str, Any] | None = None,
        start_timeout_seconds: float = 600.0,
    ) -> None:
        self.base, self.profile, self.overrides = base, profile, overrides
        # The bundled server's start preset: a restarted candidate is that plus its own knobs.
        self.start_preset = start_preset
        self.tune_dir, self.view, self.server, self.url = tune_dir, view, server, url
        self.server_cmd, self.start_timeout = server_cmd, start_timeout_seconds
        self._count = 0
        self._plans: dict[str, tuple[Any, ...]] = {}

    def _plans_at(self, scale: str) -> tuple[Any, ...]:
        if scale not in self._plans:
            self._plans[scale] = tuple(
                resolve_plans(
                    [self.profile],
                    self.base.gates_file,
                    scale=scale,
                    extra_overrides=self.overrides,
                )
            )
        return self._plans[scale]

    def __call__(self, candidate: Candidate, rung: int, scale: str) -> Measurement:
        self._count += 1
        run_dir = self.tune_dir / f"candidate-{self._count:03d}-{scale}"
        config = dataclasses.replace(
            self.base, plans=self._plans_at(scale), scale=scale, run_dir=run_dir
        )
        started = time.monotonic()
        preset = preset_of(candidate.settings)
        try:
            if self.server_cmd is not None:
                return self._by_command(candidate, rung, scale, config, started)
            if any(k in START_ONLY_KEYS for k in preset):
                # Start-only: a bundled server of its own, started like the shared one (its
                # start preset and --server-arg flags) plus the candidate's settings.
                config = dataclasses.replace(
                    config,
                    target_url=None,
                    attached_server=None,
                    preset_name=CANDIDATE_PRESET,
                    preset=preset_of(candidate.settings, self.start_preset),
                )
                result = execute(config, self.view)
                return _own_server(measurement_of(result, rung, scale, time.monotonic() - started))
            elif preset:
                config = dataclasses.replace(
                    config,
                    target_url=self.url,
                    attached_server=self.server,
                    preset_name=CANDIDATE_PRESET,
                    preset=preset,
                )
            result = execute(config, self.view)
        except UsageError as exc:
            return _not_measured(rung, scale, run_dir, started, int(exc.exit_code), str(exc))
        return measurement_of(result, rung, scale, time.monotonic() - started)

    def _by_command(
        self, candidate: Candidate, rung: int, scale: str, config: RunConfig, started: float
    ) -> Measurement:
        assert self.server_cmd is not None
        port = free_port()
        argv = command_argv(self.server_cmd, candidate.settings, port)
        url = self.url if self.url is not None else f"http://127.0.0.1:{port}"
        run_dir = config.run_dir
        child = None
        try:
            try:
                child = start_child("target server", argv, log_path=run_dir / "server-cmd.log")
                wait_for_health(url, timeout_seconds=self.start_timeout, child=child)
            except ProcessError as exc:
                note = f"the server command did not start: {exc}"
                return _not_measured(rung, scale, run_dir, started, int(ExitCode.NO_DATA), note)
            startup = time.monotonic() - started
            result = execute(dataclasses.replace(config, target_url=url), self.view)
        finally:
            if child is not None:
                child.stop(timeout_seconds=30.0)
        m = measurement_of(result, rung, scale, time.monotonic() - started)
        return _own_server(dataclasses.replace(m, startup_seconds=startup))


def _not_measured(
    rung: int, scale: str, run_dir: Path, started: float, code: int, note: str
) -> Measurement:
    return Measurement(
        rung=rung,
        scale=scale,
        outcome="no_data",
        exit_code=code,
        run_dir=str(run_dir),
        seconds=time.monotonic() - started,
        note=note,
    )


def _own_server(m: Measurement) -> Measurement:
    """A candidate's own server that dies fails that candidate (a setting that runs out of
    memory, say), not the whole search: only the shared target's death ends it."""
    if m.outcome != "target_died":
        return m
    return dataclasses.replace(
        m, outcome="no_data", note=f"the candidate's own server died: {m.note}".rstrip(": ")
    )


def measurement_of(result: RunResult, rung: int, scale: str, seconds: float) -> Measurement:
    code = int(result.exit_code)
    outcome = {0: "pass", 1: "fail", 3: "inconclusive"}.get(code, "no_data")
    if result.fault is not None and result.fault.ended in ("interrupted", "target_died"):
        outcome = result.fault.ended
    ev = result.evaluation
    by_gate = {v.gate: v for v in (ev.verdicts if ev is not None else ())}
    gates = {v.id: v.status.value for v in (ev.verdicts if ev is not None else ()) if not v.monitor}
    key_gates = tuple(v.id for v in (ev.verdicts if ev is not None else ()) if v.key)
    failed = tuple(
        v.id
        for v in (ev.verdicts if ev is not None else ())
        if v.blocking and v.status in (Status.FAIL, Status.INCONCLUSIVE, Status.NO_DATA)
    )
    objective = by_gate.get(OBJECTIVE_GATE)
    return Measurement(
        rung=rung,
        scale=scale,
        outcome=outcome,
        exit_code=code,
        run_dir=str(result.run_dir),
        seconds=seconds,
        objective=objective.value if objective is not None else None,
        objective_interval=objective.interval if objective is not None else None,
        objective_n=objective.n if objective is not None else 0,
        throughput=_value(by_gate.get(THROUGHPUT_GATE)),
        latency_p99=_value(by_gate.get(LATENCY_GATE)),
        gates=gates,
        key_gates=key_gates,
        failed=failed,
        note=result.fault.message if result.fault is not None else "",
    )


def _value(verdict: Any) -> float | None:
    return None if verdict is None else verdict.value
