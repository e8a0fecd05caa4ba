"""`batchgate tune`'s knob space and search, with a fake measurement of known truth: which
candidates it tries, what it reuses, what it promotes, how it respects the budget, which it
picks, and that it stops on an interrupted run."""

from __future__ import annotations

import pytest

from gate.errors import UsageError
from gate.orchestrator.live import LiveView
from gate.tune.candidate import Candidate, Measurement
from gate.tune.search import TuneSearch, rungs_from
from gate.tune.space import KnobSpace, parse_knobs, preset_of, short_name


def _space(**values):
    parsed = parse_knobs(
        ",".join(values), [f"{k}={','.join(map(str, v))}" for k, v in values.items()]
    )
    return KnobSpace.build(parsed, incumbent={}, unloaded_tpot_seconds=None)


class FakeTarget:
    """Objective = a known function of the settings (lower is better); `failing` settings fail a
    gate; `unsure` settings are inconclusive at the first rung and pass with more samples."""

    def __init__(self, objective, failing=lambda s: False, unsure=lambda s: False, seconds=1.0):
        self.objective, self.failing, self.unsure, self.seconds = (
            objective,
            failing,
            unsure,
            seconds,
        )
        self.calls: list[tuple[str, int]] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self, candidate: Candidate, rung: int, scale: str) -> Measurement:
        s = candidate.settings
        self.calls.append((candidate.key, rung))
        self.now += self.seconds * (5.0**rung)
        outcome = (
            "fail"
            if self.failing(s)
            else "inconclusive"
            if self.unsure(s) and rung == 0
            else "pass"
        )
        value = self.objective(s)
        return Measurement(
            rung=rung,
            scale=scale,
            outcome=outcome,
            exit_code=0,
            run_dir="-",
            seconds=self.seconds * (5.0**rung),
            objective=value,
            objective_interval=(value * 0.9, value * 1.1),
        )


def _search(space, incumbent, target, budget=1e9, rungs=("smoke", "quick"), clock=None):
    return TuneSearch(
        space=space,
        incumbent=incumbent,
        rungs=rungs,
        higher_is_better=False,
        budget_seconds=budget,
        measure=target,
        view=LiveView(),
        clock=clock or target.clock,
    )


def test_knob_names_values_and_presets() -> None:
    parsed = parse_knobs("policy,max_wait_ms", ["max_wait_ms=0,5,5,200", "max_num_seqs=8,16"])
    assert parsed == [
        ("policy", None),
        ("interactive.max_wait_ms", (0, 5, 200)),
        ("max_num_seqs", (8, 16)),
    ]
    space = KnobSpace.build(parsed, incumbent={"max_num_seqs": 64}, unloaded_tpot_seconds=None)
    assert space.by_path("policy").values == ("continuous", "dynamic", "static", "slo")
    assert space.by_path("max_num_seqs").values == (8, 16, 64)  # the incumbent joins the grid
    assert space.neighbours("max_num_seqs", 16) == [11, 32]
    assert space.neighbours("policy", "static") == []
    assert preset_of(
        {"policy": "dynamic", "interactive.max_wait_ms": 5, "batch.max_wait_ms": 9}
    ) == {"policy": "dynamic", "interactive": {"max_wait_ms": 5}, "batch": {"max_wait_ms": 9}}
    assert short_name("interactive.max_wait_ms") == "max_wait_ms"


def test_slo_target_grid_follows_the_calibrated_time_per_token() -> None:
    parsed = parse_knobs("slo_target_ms", [])
    fast = KnobSpace.build(parsed, incumbent={}, unloaded_tpot_seconds=0.002).by_path(
        "slo_target_ms"
    )
    slow = KnobSpace.build(parsed, incumbent={}, unloaded_tpot_seconds=0.020).by_path(
        "slo_target_ms"
    )
    assert [round(b / a) for a, b in zip(fast.values, slow.values, strict=True)] == [10] * 4
    with pytest.raises(UsageError, match="slo_target_ms"):
        KnobSpace.build(parsed, incumbent={}, unloaded_tpot_seconds=None)


@pytest.mark.parametrize(
    ("knobs", "values", "message"),
    [
        ("polcy", [], "unknown knob 'polcy'"),
        ("policy", ["policy=fast"], "not one of"),
        ("max_num_seqs", ["max_num_seqs=0"], "integer >= 1"),
        ("max_wait_ms", ["max_wait_ms=-1"], ">= 0"),
        ("max_wait_ms", ["max_wait_ms"], "KNOB=v1,v2"),
        ("interactive.colour", [], "unknown knob"),
        ("policy,policy", [], "twice"),
    ],
)
def test_bad_knobs_are_usage_errors(knobs: str, values: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_knobs(knobs, values)


def test_search_finds_the_best_passing_candidate_and_refines_near_it() -> None:
    space = _space(policy=("continuous", "dynamic"), max_wait_ms=(5, 20, 200))
    # Truth: dynamic is bad (fails); lower windows are better; the optimum is between grid points.
    target = FakeTarget(
        lambda s: abs(s["interactive.max_wait_ms"] - 10) + 1,
        failing=lambda s: s["policy"] == "dynamic",
    )
    search = _search(space, {"policy": "dynamic", "interactive.max_wait_ms": 200}, target)
    winner = search.search()
    assert winner is not None and winner.settings["policy"] == "continuous"
    tried = {c.settings["interactive.max_wait_ms"] for c in search.candidates.values()}
    assert 10 in tried  # the geometric midpoint of 5 and 20, found by the refinement
    assert winner.settings["interactive.max_wait_ms"] == 10
    assert all(m.outcome == "pass" for m in winner.measurements)
    assert any(m.rung == 1 for m in winner.measurements)  # confirmed with more samples
    # Each distinct setting is measured at most once per rung (repeats reuse their samples).
    assert len(target.calls) == len(set(target.calls))


def test_inconclusive_candidates_get_more_samples_not_a_guess() -> None:
    space = _space(max_wait_ms=(5, 200))
    target = FakeTarget(
        lambda s: s["interactive.max_wait_ms"], unsure=lambda s: s["interactive.max_wait_ms"] == 5
    )
    search = _search(space, {"interactive.max_wait_ms": 200}, target)
    winner = search.search()
    five = next(c for c in search.candidates.values() if c.settings["interactive.max_wait_ms"] == 5)
    assert [m.outcome for m in five.measurements] == ["inconclusive", "pass"]
    assert winner is five


def test_the_budget_is_respected_and_what_was_left_out_is_counted() -> None:
    space = _space(policy=("continuous", "dynamic", "static"), max_wait_ms=(0, 5, 20, 50, 200))
    target = FakeTarget(lambda s: s["interactive.max_wait_ms"], seconds=10.0)
    search = _search(
        space, {"policy": "continuous", "interactive.max_wait_ms": 20}, target, budget=45.0
    )
    search.search()
    assert target.now <= 45.0 + 1e-9
    assert search.skipped > 0 and len(target.calls) == 4


def test_a_failure_with_more_samples_disqualifies() -> None:
    space = _space(max_wait_ms=(5, 200))
    target = FakeTarget(lambda s: s["interactive.max_wait_ms"])
    original = target.__call__

    def measure(candidate, rung, scale):
        m = original(candidate, rung, scale)
        if candidate.settings["interactive.max_wait_ms"] == 5 and rung == 1:
            return Measurement(**{**m.to_dict(), "outcome": "fail", "objective_interval": None})
        return m

    search = _search(space, {"interactive.max_wait_ms": 200}, measure, clock=target.clock)
    winner = search.search()
    assert winner is not None and winner.settings["interactive.max_wait_ms"] != 5
    assert all(m.outcome == "pass" for m in winner.measurements)
    five = next(c for c in search.candidates.values() if c.settings["interactive.max_wait_ms"] == 5)
    assert [m.outcome for m in five.measurements] == ["pass", "fail"]  # better at smoke: out


def test_an_interrupted_run_stops_the_search() -> None:
    space = _space(max_wait_ms=(0, 5, 20, 200))
    target = FakeTarget(lambda s: 1.0)

    def measure(candidate, rung, scale):
        m = target(candidate, rung, scale)
        if len(target.calls) == 2:
            return Measurement(**{**m.to_dict(), "outcome": "interrupted"})
        return m

    search = _search(space, {"interactive.max_wait_ms": 200}, measure, clock=target.clock)
    search.search()
    assert search.ended == "interrupted" and len(target.calls) == 2


def test_rungs_start_at_the_scale_asked() -> None:
    assert rungs_from("smoke") == ("smoke", "quick", "full")
    assert rungs_from("full") == ("full",)


def test_one_setting_one_key_and_the_template_means_the_interactive_class() -> None:
    from gate.tune.runner import command_argv
    from gate.tune.space import candidate_key, flatten_settings

    live = {"policy": "dynamic", "interactive": {"max_wait_ms": 20.0}}
    incumbent = flatten_settings(
        live, ["policy", "interactive.max_wait_ms", "num_gpu_blocks_override"]
    )
    assert incumbent == {
        "policy": "dynamic",
        "interactive.max_wait_ms": 20,
        "num_gpu_blocks_override": None,
    }  # start-only: the server's default
    assert candidate_key({"interactive.max_wait_ms": 20.0}) == candidate_key(
        {"interactive.max_wait_ms": 20}
    )
    settings = {"interactive.max_wait_ms": 5, "batch.max_wait_ms": 50}
    assert command_argv("s --w {max_wait_ms} --b {batch_max_wait_ms} --p {port}", settings, 9) == [
        "s",
        "--w",
        "5",
        "--b",
        "50",
        "--p",
        "9",
    ]
    with pytest.raises(UsageError, match="max_num_seqs"):
        command_argv("s --n {max_num_seqs}", settings, 9)
    assert preset_of(
        {"num_gpu_blocks_override": None, "policy": "static"},
        {"policy": "x", "interactive": {"max_wait_ms": 200}},
    ) == {"policy": "static", "interactive": {"max_wait_ms": 200}}


def test_a_candidates_own_server_dying_fails_that_candidate_only() -> None:
    from gate.tune.runner import _own_server

    died = Measurement(
        rung=0,
        scale="smoke",
        outcome="target_died",
        exit_code=5,
        run_dir="-",
        seconds=1.0,
        note="target stopped answering",
    )
    assert _own_server(died).outcome == "no_data"
    assert "own server died" in _own_server(died).note
