"""The `abort_on_fail` watch of one running profile: is this run already doomed?

Owns polling a profile's growing files while its load runs — counting their complete lines,
reading exactly those (`gate.rundir.profile_prefix`) with a stand-in for the load.json not yet
written (the profile's warm-up, a clock anchor), and asking
`gate.verdicts.evaluate.IncrementalEvaluator` for a confident failure of an `abort_on_fail` gate
after the grace period — and turning one into the `AbortRecord` the session writes as `abort.json`.
It polls at most once a second, less often when a check gets slow (a long run's file grows), so it
never takes more than about a tenth of the process. It does not stop the load
(`gate.orchestrator.session`) or judge anything itself.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from gate.gates.spec import GatesFile
from gate.rundir.abort import AbortRecord
from gate.rundir.run import RunData, RunDirError, complete_lines, profile_prefix
from gate.verdicts.evaluate import IncrementalEvaluator

__all__ = ["AbortWatch"]


class AbortWatch:
    def __init__(
        self,
        *,
        gates_file: GatesFile,
        profile: str,
        directory: Path,
        warmup_seconds: float | None,
        started_at: float,
        min_interval_seconds: float = 1.0,
        max_share_of_time: float = 0.1,
    ) -> None:
        self.evaluator = IncrementalEvaluator(gates_file)
        self.profile = profile
        self.directory = Path(directory)
        self.warmup_seconds = warmup_seconds
        self.started_at = started_at  # time.monotonic() when the load process started
        self.min_interval_seconds = min_interval_seconds
        self.max_share_of_time = max_share_of_time
        self.gates = tuple(
            g for g in self.evaluator.gates if g.scope.profile is None or profile in g.scope.profile
        )
        self._next_at = started_at + self.evaluator.grace_seconds

    @property
    def active(self) -> bool:
        """Whether any abort_on_fail gate covers this profile."""
        return bool(self.gates)

    def poll(self, now: float | None = None) -> AbortRecord | None:
        """The record of a confident failure (stop the load), or None (carry on)."""
        now = time.monotonic() if now is None else now
        if not self.gates or now < self._next_at:
            return None
        elapsed = now - self.started_at
        check_started = time.monotonic()
        lines = complete_lines(self.directory)
        record = AbortRecord(
            gate="",
            profile=self.profile,
            elapsed_seconds=elapsed,
            grace_seconds=self.evaluator.grace_seconds,
            lines=lines,
            warmup_seconds=self.warmup_seconds,
            monotonic_at_check=time.monotonic(),
            wall_at_check=time.time(),
        )
        try:
            view = profile_prefix(
                self.profile, self.directory, lines=lines, load=record.load_standin()
            )
        except RunDirError:
            view = None  # a line the final evaluation will report; no abort on it
        failing = []
        if view is not None:
            run = RunData(
                path=str(self.directory.parent), manifest=None, profiles={self.profile: view}
            )
            verdicts = self.evaluator.check(run, elapsed_seconds=elapsed)
            failing = [v for v in verdicts if v.profile == self.profile]
        took = time.monotonic() - check_started
        self._next_at = now + max(self.min_interval_seconds, took / self.max_share_of_time)
        if not failing:
            return None
        return dataclasses.replace(record, gate=failing[0].gate, verdict=failing[0].to_dict())
