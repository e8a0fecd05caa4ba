"""The search of `batchgate tune`: the batching settings that maximise a workload's objective
while every gate passes with confidence, within a time budget.

Owns the order of the search and the choice of the winner:

1. **Coarse**: the incumbent (the target as found) and one-knob-at-a-time variations around it,
   each measured once at the first rung (the run's `--scale`).
2. **Refine** near the best passing candidate: the best value of every knob together; one step
   of coordinate search around the best when it is not the incumbent (each knob across its grid,
   the others at the best's values); then the geometric midpoints between the best value of
   each numeric knob and its grid neighbours.
3. **Successive halving**: the better half of what has not failed (passing or inconclusive, by
   objective) is measured again at the next rung (5x the samples: smoke -> quick -> full), until
   one candidate is left, the rungs run out, or the budget does. An inconclusive candidate is
   promoted for more samples rather than guessed at.

A candidate whose settings repeat is not measured again at a rung it already has (its samples
are reused). A run that would not finish within the budget (estimated from the runs at that rung
so far) is not started. The winner is the passing candidate with the best objective at the
highest rung any candidate passed at. It measures nothing itself: a `measure` callable runs one
candidate at one rung (`gate.tune.runner`); it does not print or write files
(`gate.commands.tune`, `gate.outputs`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gate.orchestrator.live import LiveView
from gate.tune.candidate import Candidate, Measurement
from gate.tune.space import KnobSpace

__all__ = ["RUNG_SAMPLE_FACTOR", "SCALES", "Measure", "TuneSearch", "rungs_from"]

SCALES = ("smoke", "quick", "full")
RUNG_SAMPLE_FACTOR = 5.0  # quick sends 5x smoke's requests, full 4x quick (gate.orchestrator.plan)
_SCALE_FACTOR = {"smoke": 1.0, "quick": 5.0, "full": 20.0}


def rungs_from(scale: str) -> tuple[str, ...]:
    return SCALES[SCALES.index(scale) :]


Measure = Callable[[Candidate, int, str], Measurement]


class TuneSearch:
    def __init__(
        self,
        *,
        space: KnobSpace,
        incumbent: Mapping[str, Any],
        rungs: Sequence[str],
        higher_is_better: bool,
        budget_seconds: float,
        measure: Measure,
        view: LiveView,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.space, self.rungs, self.higher = space, tuple(rungs), higher_is_better
        self.budget, self.measure_fn, self.view, self.clock = budget_seconds, measure, view, clock
        # A knob the target does not report (a start-only key left at the server's default) is
        # None in the incumbent: "as the server has it", never a made-up grid value.
        self.incumbent = {k.path: incumbent.get(k.path) for k in space.knobs}
        self.candidates: dict[str, Candidate] = {}
        self.skipped = 0  # runs left out for the budget
        self.ended = "completed"
        self._start = clock()

    # -- bookkeeping -----------------------------------------------------------------------

    def _candidate(self, settings: Mapping[str, Any], origin: str) -> Candidate:
        fresh = Candidate(settings=dict(settings), origin=origin)
        return self.candidates.setdefault(fresh.key, fresh)

    def _left(self) -> float:
        return self.budget - (self.clock() - self._start)

    def _estimate(self, rung: int) -> float:
        """Expected seconds of one run at `rung`: the mean of the runs there so far, else the
        first rung's load time scaled by the samples (a server's start-up is not scaled)."""
        runs = [m for c in self.candidates.values() for m in c.measurements]
        same = [m.seconds for m in runs if m.rung == rung]
        if same:
            return sum(same) / len(same)
        first = [m for m in runs if m.rung == 0]
        if not first:
            return 0.0  # nothing known yet: the first run always goes
        factor = _SCALE_FACTOR[self.rungs[rung]] / _SCALE_FACTOR[self.rungs[0]]
        startup = sum(m.startup_seconds for m in first) / len(first)
        load = sum(m.seconds - m.startup_seconds for m in first) / len(first)
        return startup + factor * load

    def _run(self, candidate: Candidate, rung: int) -> Measurement | None:
        """Measure unless already measured at this rung, out of budget or stopped."""
        if self.ended != "completed":
            return None
        done = candidate.at(rung)
        if done is not None:
            return done  # the same settings again: reuse, do not re-measure
        if self._estimate(rung) > self._left():
            self.skipped += 1
            return None
        self.view.message(f"batchgate tune: [{self.rungs[rung]}] {candidate.label}")
        m = self.measure_fn(candidate, rung, self.rungs[rung])
        candidate.measurements.append(m)
        self.view.message(
            f"batchgate tune:   -> {m.outcome}, objective {_fmt(m.objective)}"
            + (f" ({', '.join(m.failed)})" if m.failed else "")
        )
        if m.outcome == "interrupted":
            self.ended = "interrupted"
        elif m.outcome == "target_died":
            self.ended = "target died"
        return m

    def _rank(self, candidates: Sequence[Candidate], rung: int) -> list[Candidate]:
        def score(c: Candidate) -> float:
            m = c.at(rung)
            value = m.objective if m is not None else None
            if value is None:
                return float("inf")
            return -value if self.higher else value

        return sorted(candidates, key=score)

    # -- the search ------------------------------------------------------------------------

    def search(self) -> Candidate | None:
        incumbent = self._candidate(self.incumbent, "incumbent")
        coarse = [incumbent]
        for knob in self.space.knobs:
            for value in knob.values:
                if value != self.incumbent[knob.path]:
                    coarse.append(self._candidate({**self.incumbent, knob.path: value}, "coarse"))
        for c in coarse:
            self._run(c, 0)
        self._refine()
        self._halve()
        return self.winner()

    def _passing(self, rung: int) -> list[Candidate]:
        return [c for c in self.candidates.values() if (m := c.at(rung)) and m.outcome == "pass"]

    def _refine(self) -> None:
        passing = self._passing(0)
        if not passing:
            return
        # Every knob at its best one-at-a-time value, together.
        combined = dict(self.incumbent)
        for knob in self.space.knobs:
            varied = [
                c
                for c in passing
                if all(v == self.incumbent[p] for p, v in c.settings.items() if p != knob.path)
            ]
            if varied:
                combined[knob.path] = self._rank(varied, 0)[0].settings[knob.path]
        self._run(self._candidate(combined, "combined"), 0)
        # When the best is not the incumbent (say the incumbent fails), its own one-at-a-time
        # neighbourhood has not been seen: one step of coordinate search around it.
        best = self._rank(self._passing(0), 0)[0]
        if best.settings != self.incumbent:
            for knob in self.space.knobs:
                for value in knob.values:
                    if value != best.settings[knob.path]:
                        self._run(self._candidate({**best.settings, knob.path: value}, "refine"), 0)
        # Then between the grid points next to the best value of each numeric knob.
        best = self._rank(self._passing(0), 0)[0]
        for path, value in best.settings.items():
            for mid in self.space.neighbours(path, value):
                self._run(self._candidate({**best.settings, path: mid}, "refine"), 0)

    def _halve(self) -> None:
        rung = 0
        while rung + 1 < len(self.rungs) and self.ended == "completed":
            alive = [
                c
                for c in self.candidates.values()
                if (m := c.at(rung)) is not None and m.outcome in ("pass", "inconclusive")
            ]
            passing = [c for c in alive if c.at(rung).outcome == "pass"]  # type: ignore[union-attr]
            if len(passing) <= 1 and len(alive) == len(passing):
                return  # one clear answer at this rung: more samples would not change it
            ranked = self._rank(alive, rung)
            size = max(1, (len(alive) + 1) // 2)
            rung += 1
            # The better half goes up; if none of it passes there, the next ones do (budget
            # allowing), so a winner measured only at the lower rung is the last resort.
            measured = False
            for start in range(0, len(ranked), size):
                batch = [c for c in ranked[start : start + size] if self._run(c, rung) is not None]
                measured = measured or bool(batch)
                if any(c.at(rung) and c.at(rung).outcome == "pass" for c in batch):  # type: ignore[union-attr]
                    break
                if not batch or self.ended != "completed":
                    break
            if not measured:
                return

    def winner(self) -> Candidate | None:
        for rung in reversed(range(len(self.rungs))):
            passing = [
                c
                for c in self.candidates.values()
                if (m := c.at(rung)) is not None
                and m.outcome == "pass"
                # A candidate that failed when measured again at a higher rung is out.
                and all(x.outcome == "pass" for x in c.measurements if x.rung >= rung)
            ]
            if passing:
                return self._rank(passing, rung)[0]
        return None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"
