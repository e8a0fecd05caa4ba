"""bench_server.py's split of a run's wall time by the engine's step records (step_breakdown),
on hand-made records and against a real server's /admin/steps. Nothing here asserts a speed."""

from __future__ import annotations

import argparse

import httpx
import pytest

from benchmarks.step_breakdown import breakdown, fetch_steps, latest_seq, side_by_side


def _step(seq: int, start: float, duration: float, forward: float, seqs: int) -> dict:
    return {"seq": seq, "start_time": start, "duration_seconds": duration,
            "forward_seconds": forward, "num_seqs": seqs}  # fmt: skip


def test_the_split_adds_up_to_the_wall_time() -> None:
    records = [
        _step(1, 10.0, 0.010, 0.008, 2),  # part-filled first step
        _step(2, 10.012, 0.010, 0.009, 4),  # 2 ms after the first ended
        _step(3, 10.023, 0.010, 0.007, 4),  # 1 ms after
        _step(4, 10.040, 0.0, 0.0, 0),  # an idle wake-up: not a step of the run
    ]
    split = breakdown(records, elapsed=0.050, full_batch=4)
    assert split["steps"] == 3
    assert split["in_steps_seconds"] == pytest.approx(0.030)
    assert split["between_steps_seconds"] == pytest.approx(0.003)
    assert split["edges_seconds"] == pytest.approx(0.050 - 0.033)
    total = split["in_steps_seconds"] + split["between_steps_seconds"] + split["edges_seconds"]
    assert total == pytest.approx(0.050)
    assert split["forward_seconds"] == pytest.approx(0.024)
    assert split["full_step_forward_ms_median"] == pytest.approx(8.0)
    assert split["mean_num_seqs"] == pytest.approx(10 / 3)
    assert breakdown([], elapsed=1.0, full_batch=4) == {"steps": 0}
    assert side_by_side({"steps": split}, {"steps": {"steps": 0}}, "steps", "{:d}") == "3 / 0"
    assert side_by_side({}, {"steps": split}, "edges_seconds", "{:.3f}") == "- / 0.017"


def test_a_real_servers_steps_after_a_request_are_fetched_whole_or_refused(tmp_path) -> None:
    from benchmarks.bench_server import bundled_server

    args = argparse.Namespace(
        device="cpu", max_num_seqs=4, max_num_batched_tokens=256, torch_threads=1,
        extra_server_args=("--step-log-size", "8"),
    )  # fmt: skip
    with bundled_server(args) as server:
        url = server.url
        before = latest_seq(url)
        body = {"prompt": [65, 66, 67], "max_tokens": 5, "ignore_eos": True}
        httpx.post(f"{url}/v1/completions", json=body, timeout=60).raise_for_status()
        records = fetch_steps(url, before)
        assert [r["seq"] for r in records] == list(range(before + 1, before + 1 + len(records)))
        split = breakdown(records, elapsed=60.0, full_batch=1)
        assert split["steps"] == sum(r["num_seqs"] > 0 for r in records) >= 5  # one per token
        assert fetch_steps(url, latest_seq(url)) == []
        # More steps than the ring buffer keeps: a partial breakdown would mislead.
        before = latest_seq(url)
        httpx.post(f"{url}/v1/completions", json={**body, "max_tokens": 12}, timeout=60)
        with pytest.raises(RuntimeError, match="step records were evicted"):
            fetch_steps(url, before)
