"""Answer-consistency probes in a load: marked records, counted in the load, answered whole;
the `consistency_probes` profile answers each probe once, alone; the mixed profiles' bodies."""

from __future__ import annotations

import pytest
from lg_support import read_load, read_records, run_loadgen

from gate.metrics.consistency import compare
from loadgen.plan import build_plan
from loadgen.probes import PROBE_GROUP, PROBE_MAX_TOKENS, PROBE_SET, probe_schedule
from loadgen.profiles import resolve
from loadgen.records import validate_load_json, validate_record
from loadgen.sampling_mix import SIGNATURES


def test_the_probe_set_pairs_greedy_and_seeded_probes() -> None:
    kinds = [p.kind for p in PROBE_SET]
    assert kinds == ["greedy", "greedy", "seeded", "seeded"] * (len(PROBE_SET) // 4)
    assert all(p.body["temperature"] == 0.0 for p in PROBE_SET if p.kind == "greedy")
    seeded = [p for p in PROBE_SET if p.kind == "seeded"]
    assert all(p.body["temperature"] > 0 and "seed" in p.body for p in seeded)
    assert len({p.body["seed"] for p in seeded}) == len(seeded)


def test_probe_schedule_spreads_groups_over_the_profile() -> None:
    groups = probe_schedule(7, 10.0)  # an odd count: the last group is one probe
    assert [len(m) for _, m in groups] == [2, 2, 2, 1]
    assert [round(t, 3) for t, _ in groups] == [1.25, 3.75, 6.25, 8.75]
    assert [i for _, m in groups for i in m] == [0, 1, 2, 3, 4, 5, 6]
    assert probe_schedule(0, 10.0) == [] and PROBE_GROUP == 2


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_probes_must_be_a_whole_number(value) -> None:
    from loadgen.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'?probes'? must be"):
        resolve("steady", {"probes": value})


def test_reasoning_mix_thinks_only_in_its_second_stage() -> None:
    plan = build_plan(resolve("reasoning_mix", {"main_seconds": 40.0}, "full"))
    before = [r for r in plan if r.stage == "before_thinking"]
    during = [r for r in plan if r.stage == "with_thinking"]
    assert before and all(r.length_class == "short" and r.body is None for r in before)
    thinking = [r for r in during if r.length_class == "thinking"]
    assert 0.2 < len(thinking) / len(during) < 0.4
    assert all(r.body["chat_template_kwargs"] == {"enable_thinking": True} for r in thinking)
    assert all(r.max_tokens > r.body["thinking_tokens"] for r in thinking)


def test_sampling_mix_is_uniform_then_each_request_its_own() -> None:
    spec = resolve("sampling_mix", {}, "smoke")
    from loadgen.plan import RequestFactory

    factory = RequestFactory(spec)
    uniform = [factory.make(i, 0.0, "uniform").body for i in range(10)]
    mixed = [factory.make(i, 0.0, "mixed").body for i in range(10, 60)]
    assert all(b == {"temperature": 0.7, "top_p": 0.9} for b in uniform)
    families = {tuple(sorted(k for k in b if k != "seed")) for b in mixed}
    assert len(families) == len(SIGNATURES)
    seeds = [b["seed"] for b in mixed if "seed" in b]
    assert len(set(seeds)) == len(seeds) > 30


@pytest.mark.slow
def test_probes_are_marked_counted_and_answered_alone_and_under_load(fake_server, tmp_path):
    server = fake_server("--ttft-ms", "5", "--itl-ms", "3")
    out = tmp_path / "steady"
    result = run_loadgen(
        "--target", server.url, "--profile", "steady", "--out", str(out), "--duration", "2",
        "--rate", "20", "--set", "output_tokens=4", "--set", "probes=7",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records, load = read_records(out), read_load(out)
    assert validate_load_json(load) == [] and all(validate_record(r) == [] for r in records)
    probes = [r for r in records if r["probe"] is not None]
    assert sorted(r["probe"] for r in probes) == [0, 1, 2, 3, 4, 5, 6]  # odd: none lost
    assert all(r["probe_answer"] == "x" * PROBE_MAX_TOKENS for r in probes)
    assert len(records) == load["sent_requests"] == load["planned_requests"]
    alone = tmp_path / "alone"
    result = run_loadgen(
        "--target", server.url, "--profile", "consistency_probes", "--out", str(alone),
        "--scale", "full",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    answered = read_records(alone)
    assert sorted(r["probe"] for r in answered) == list(range(len(PROBE_SET)))
    assert all(r["stage"] == "alone" and r["status"] == "ok" for r in answered)
    # A server whose answers change with their company: a probe that finds its pair's other
    # probe in flight differs from its answer alone from the 4th character on.
    server.control(vary_under_load=True)
    again = tmp_path / "again"
    result = run_loadgen(
        "--target", server.url, "--profile", "steady", "--out", str(again), "--duration", "2",
        "--rate", "5", "--set", "output_tokens=4", "--set", "probes=4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    by_probe = {r["probe"]: r["probe_answer"] for r in answered}
    diverged = [
        compare(by_probe[r["probe"]], r["probe_answer"])
        for r in read_records(again)
        if r["probe"] is not None
    ]
    assert 3 in diverged and set(diverged) <= {None, 3}
