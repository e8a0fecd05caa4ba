"""`prefix_cache_hit_ratio` with `fail: "> 0.8x ideal"`: the server's counters over the window,
judged against the ideal the gate computes from the replayed trace window."""

from __future__ import annotations

import json

import pytest
from rundir_builder import WALL0, request_records, write_profile

from gate.errors import BatchgateError
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate

GATES = """\
version: 1
gates:
  - name: prefix_cache_hit_ratio
    metric: prefix_cache_hit_ratio
    statistic: final
    scope: {profile: trace}
    fail: "> 0.8x ideal"
"""

# Four requests sharing block 1 (16 tokens), then block 2 for the last two: an infinite cache
# hits 16 + 16 + 32 = 64 of 4 x 48 = 192 prompt tokens (the first request misses).
WINDOW = [
    {"timestamp": 0.1 * i, "input_tokens": 48, "output_tokens": 4, "hash_ids": ids,
     "block_tokens": 16}
    for i, ids in enumerate(([1, 9], [1, 8], [1, 2], [1, 2, 5]))
]  # fmt: skip
IDEAL = 64 / 192


def _run(tmp_path, hits, queries, *, window=WINDOW, calibration=None, unavailable=()):
    scrapes = [
        {"t": WALL0 + t, "phase": "poll", "ok": True, "unavailable": list(unavailable),
         "metrics": {"prefix_cache_hits_total": h, "prefix_cache_queries_total": q}}
        for t, h, q in ((0.1, 100, 1000), (0.3, 100 + hits, 1000 + queries))
    ]  # fmt: skip
    if unavailable:
        for scrape in scrapes:
            scrape["metrics"] = {}
    directory = write_profile(tmp_path, "trace", request_records(40), scrapes=scrapes)
    if window is not None:
        (directory / "trace.jsonl").write_text("".join(json.dumps(w) + "\n" for w in window))
    if calibration is not None:
        (tmp_path / "calibration.json").write_text(json.dumps(calibration))
    return evaluate(load_run(tmp_path), loads(GATES, path="g.yaml"))


def test_a_hit_ratio_near_the_ideal_passes_and_says_which_ideal(tmp_path) -> None:
    evaluation = _run(tmp_path, hits=60, queries=192)
    (verdict,) = evaluation.verdicts
    assert verdict.status.value == "pass" and verdict.value == pytest.approx(60 / 192)
    assert verdict.threshold_value == pytest.approx(0.8 * IDEAL)
    assert any("infinite LRU" in note for note in verdict.notes)


def test_a_cache_that_does_not_hit_fails(tmp_path) -> None:
    evaluation = _run(tmp_path, hits=0, queries=192)
    assert evaluation.verdicts[0].status.value == "fail" and int(evaluation.exit_code) == 1


def test_the_ideal_is_an_lru_of_the_calibrated_kv_capacity(tmp_path) -> None:
    # 16 tokens hold one block: requests 3 and 4 evict the shared block 1 they would hit, so
    # the ideal is lower and the same measurement is held to less.
    small = {"kv_capacity": {"tokens": 16, "source": "test"}}
    evaluation = _run(tmp_path, hits=20, queries=192, calibration=small)
    (verdict,) = evaluation.verdicts
    assert verdict.threshold_value < 0.8 * IDEAL
    assert any("KV capacity (16 tokens)" in note for note in verdict.notes)


def test_without_a_replayed_window_or_counters_it_is_no_data(tmp_path) -> None:
    no_window = _run(tmp_path / "a", hits=60, queries=192, window=None)
    assert no_window.verdicts[0].status.value == "no_data"
    assert "trace.jsonl" in no_window.verdicts[0].reason
    hidden = _run(tmp_path / "b", hits=0, queries=0, unavailable=["prefix_cache_hits_total"])
    assert hidden.verdicts[0].status.value == "no_data"


def test_no_lookups_while_prompts_were_served_is_a_hit_ratio_of_zero(tmp_path) -> None:
    # vLLM and the bundled server count no lookups with prefix caching off.
    off = _run(tmp_path, hits=0, queries=0)
    (verdict,) = off.verdicts
    assert (verdict.status.value, verdict.value) == ("fail", 0.0)


def test_the_ideal_fits_only_the_hit_ratio() -> None:
    with pytest.raises(BatchgateError, match="fits only prefix_cache_hit_ratio"):
        loads(
            GATES.replace(
                "prefix_cache_hit_ratio\n    statistic", "recompute_ratio\n    statistic"
            ),
            path="g.yaml",
        )


def test_sglangs_hit_rate_gauge_stands_in_for_counters_it_does_not_have(tmp_path) -> None:
    scrapes = [
        {"t": WALL0 + t, "phase": "poll", "ok": True, "unavailable": ["prefix_cache_queries_total"],
         "metrics": {"prefix_cache_hits_total": 10 * t, "prefix_cache_hit_rate": rate}}
        for t, rate in ((0.1, 0.3), (0.2, 0.4), (0.3, 0.5))
    ]  # fmt: skip
    directory = write_profile(tmp_path, "trace", request_records(40), scrapes=scrapes)
    (directory / "trace.jsonl").write_text("".join(json.dumps(w) + "\n" for w in WINDOW))
    (verdict,) = evaluate(load_run(tmp_path), loads(GATES, path="g.yaml")).verdicts
    assert verdict.status.value == "pass" and verdict.value == pytest.approx(0.4)
    assert "hit-rate gauge" in verdict.reason
