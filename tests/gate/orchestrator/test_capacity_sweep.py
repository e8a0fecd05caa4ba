"""The capacity sweep's schedule and stop rule, against modelled targets (no process runs):
doubling from 16, a plateau, 429s, the stated limit, a saturated client, the time budget."""

from __future__ import annotations

import dataclasses

import pytest

from gate.calibration.procedure import CalibrationSpec
from gate.orchestrator.capacity_sweep import StepFigures, stated_limit, sweep


def _step(users: int, tps: float, **changes: object) -> StepFigures:
    base = StepFigures(
        users=users, seconds=4.0, phase=f"capacity-{users}", completed=100 * users,
        output_tokens_per_second=tps, rps=tps / 12, e2e_p50=0.1, failed=0, rate_limited=0,
        records=100 * users, client_valid=True, client_cpu_ratio=0.2, client_reasons=(),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _slots(slots: int, per_stream: float = 10.0):  # type: ignore[no-untyped-def]
    """A target running `slots` streams at `per_stream` tokens/s each; the rest wait."""
    seen: list[int] = []

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        seen.append(users)
        return _step(users, min(users, slots) * per_stream, phase=phase, seconds=seconds)

    return measure, seen


def test_doubling_finds_a_limit_far_above_64_users():
    measure, seen = _slots(400)
    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert seen == [16, 32, 64, 128, 256, 512, 1024]
    assert result.stop == "plateau" and result.to_json()["saturated"] is True
    assert result.chosen.output_tokens_per_second == 4000.0  # the truth, 400 x 10 tok/s
    assert result.knee_users == 512  # the fewest users within 10% of the best
    # The old fixed 64-user probe is a point of the curve: 16% of the truth.
    assert result.curve[2].users == 64 and result.curve[2].output_tokens_per_second == 640.0


def test_a_cpu_bound_target_stops_after_two_steps():
    measure, seen = _slots(8)
    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert seen == [16, 32] and result.stop == "plateau" and result.chosen.users == 16


def test_the_stated_limit_clips_the_last_step_and_stops_there():
    measure, seen = _slots(10_000)
    limit = {"users": 300, "source": "/admin/batching max_num_seqs"}
    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit=limit)
    assert seen == [16, 32, 64, 128, 256, 300]
    assert result.stop == "limit" and result.chosen.users == 300
    assert "max_num_seqs" in result.detail


def test_a_limit_below_the_start_is_the_only_step():
    measure, seen = _slots(10_000)
    result = sweep(
        measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": 4, "source": "x"}
    )
    assert seen == [4] and result.stop == "limit"


def test_429s_stop_the_sweep_and_the_best_step_before_stands():
    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        if users >= 64:
            return _step(users, 500.0, rate_limited=3, failed=3, phase=phase)
        return _step(users, users * 20.0, phase=phase)

    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert [s.users for s in result.curve] == [16, 32, 64]
    assert result.stop == "errors" and "429" in result.detail
    assert result.chosen.users == 32 and result.chosen.output_tokens_per_second == 640.0
    assert result.to_json()["saturated"] is True


def test_a_saturated_client_fails_closed():
    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        if users >= 64:
            return _step(users, 700.0, client_valid=False, client_reasons=("client CPU 0.97",))
        return _step(users, users * 20.0)

    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert result.stop == "client saturated" and "client CPU 0.97" in result.detail
    assert result.chosen.client_valid is False  # the capacity carries the invalid client
    assert result.to_json()["saturated"] is False


def test_the_time_budget_bounds_the_sweep():
    now = [0.0]

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        now[0] += seconds
        return _step(users, users * 10.0, seconds=seconds)

    spec = CalibrationSpec(capacity_budget_seconds=20.0)
    result = sweep(measure=measure, spec=spec, lone_e2e=0.1, limit={"users": None},
                   clock=lambda: now[0])  # fmt: skip
    assert result.stop == "time budget" and now[0] <= 20.0
    assert result.to_json()["saturated"] is False  # a lower bound, said so


def test_a_short_step_with_few_answers_per_user_is_measured_again_longer():
    calls: list[tuple[str, float]] = []

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        calls.append((phase, seconds))
        done = users if phase.endswith("-long") is False else 10 * users
        return _step(users, 100.0 if users == 16 else 105.0, completed=done, rps=8.0)

    sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert calls[0][0] == "capacity-16" and calls[1][0] == "capacity-16-long"
    assert calls[1][1] == pytest.approx(min(120.0, 1.3 * 4 * 16 / 8.0))


class _Target:
    def __init__(self, batching=None, props=None, samples=None):  # type: ignore[no-untyped-def]
        self._batching, self._props, self._samples = batching, props, samples or {}

    def batching(self):  # type: ignore[no-untyped-def]
        return self._batching

    def llamacpp_context(self):  # type: ignore[no-untyped-def]
        return self._props

    def raw_samples(self):  # type: ignore[no-untyped-def]
        return self._samples


def test_stated_limit_reads_each_source_and_keeps_the_lowest():
    none = stated_limit(_Target(), {"tokens": None}, 52.0)  # type: ignore[arg-type]
    assert none == {"users": None, "source": "not stated"}
    ours = stated_limit(_Target(batching={"max_num_seqs": 256}), {"tokens": 65536}, 52.0)  # type: ignore[arg-type]
    assert ours["users"] == 256 and ours["source"] == "/admin/batching max_num_seqs"
    llama = stated_limit(_Target(props=(4096, 4)), {"tokens": None}, 52.0)  # type: ignore[arg-type]
    assert llama["users"] == 4 and "total_slots" in llama["source"]
    info = {"vllm:scheduler_config_info": [({"max_num_seqs": "512"}, 1.0)]}
    vllm = stated_limit(_Target(samples=info), {"tokens": 10_000_000}, 52.0)  # type: ignore[arg-type]
    assert vllm["users"] == 512 and "config_info" in vllm["source"]
    kv = stated_limit(_Target(), {"tokens": 5200}, 52.0)  # type: ignore[arg-type]
    assert kv["users"] == 100 and kv["source"].startswith("KV capacity")


def test_step_figures_read_a_phase_directory(tmp_path):
    from rundir_builder import request_records, write_profile

    from gate.orchestrator.capacity_sweep import PROFILE, step_figures
    from gate.rundir.run import load_run

    # 100 answers of 8 chunks, one every 10 ms, then two 429s: the throughput after the first
    # quarter, the E2E median, the failures, and the client's validity and CPU from load.json.
    records = request_records(100, itl_seconds=0.02, chunks=8)
    records += request_records(
        2, start=records[-1]["planned_at"] + 0.01, status="http_error", http_status=429
    )
    write_profile(tmp_path, PROFILE, records, measurement_valid=False)
    step = step_figures(load_run(tmp_path), users=4, seconds=1.0, phase="capacity-4")
    assert step.completed == 100 and step.failed == 2 and step.rate_limited == 2
    assert step.rps == pytest.approx(100.0, rel=0.05)  # one answer every 10 ms
    assert step.output_tokens_per_second == pytest.approx(8 * step.rps, rel=0.01)
    assert step.e2e_p50 == pytest.approx(0.1005 + 7 * 0.02, abs=1e-3)
    assert step.client_valid is False and step.client_reasons
    assert step.client_cpu_ratio == 0.2  # load.json's client_cpu_ratio.max


def _client_bound(per_worker: int, workers: list[int], ceiling: int):  # type: ignore[no-untyped-def]
    """A target of 400 streams behind a load generator whose one process drives at most
    `per_worker` users; `widen` doubles its workers up to `ceiling` (--workers auto)."""
    seen: list[tuple[str, int, int]] = []

    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        seen.append((phase, users, workers[0]))
        valid = users <= per_worker * workers[0]
        reasons = () if valid else ("client CPU peaked at 0.97 of a core",)
        return _step(users, min(users, 400) * 10.0, phase=phase, client_valid=valid,
                     client_reasons=reasons, workers=workers[0])  # fmt: skip

    def widen(step: StepFigures) -> int | None:
        if workers[0] >= ceiling:
            return None
        workers[0] = min(ceiling, 2 * workers[0])
        return workers[0]

    return measure, widen, seen


def test_auto_workers_measure_a_saturated_step_again_with_twice_the_workers():
    workers = [1]
    measure, widen, seen = _client_bound(100, workers, ceiling=16)
    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None},
                   widen=widen)  # fmt: skip
    # 128 users saturate one worker: again with 2; 256 with 2: again with 4; and so on.
    assert [(p, u, w) for p, u, w in seen if u >= 128] == [
        ("capacity-128", 128, 1), ("capacity-128-w2", 128, 2), ("capacity-256-w2", 256, 2),
        ("capacity-256-w4", 256, 4), ("capacity-512-w4", 512, 4), ("capacity-512-w8", 512, 8),
        ("capacity-1024-w8", 1024, 8), ("capacity-1024-w16", 1024, 16),
    ]  # fmt: skip
    assert result.stop == "plateau" and result.to_json()["saturated"] is True
    # The saturated tries stay in the curve, marked; the capacity is a valid step's.
    assert [s.client_valid for s in result.curve].count(False) == 4
    assert result.chosen.client_valid and result.chosen.output_tokens_per_second == 4000.0
    assert result.to_json()["capacity_phase"] == result.chosen.phase == "capacity-512-w8"
    assert result.chosen.workers == 8 and result.to_json()["curve"][-1]["workers"] == 16


def test_auto_workers_at_the_ceiling_still_fail_closed_and_say_how_many_ran():
    workers = [1]
    measure, widen, seen = _client_bound(20, workers, ceiling=2)
    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None},
                   widen=widen)  # fmt: skip
    assert [p for p, _, _ in seen] == ["capacity-16", "capacity-32", "capacity-32-w2",
                                       "capacity-64-w2"]  # fmt: skip
    assert result.stop == "client saturated" and result.chosen.client_valid is False
    assert "saturated at 64 users with 2 workers" in result.detail


def test_a_fixed_worker_count_is_never_widened():
    def measure(phase: str, users: int, seconds: float) -> StepFigures:
        return _step(users, users * 20.0, client_valid=users < 64, phase=phase)

    result = sweep(measure=measure, spec=CalibrationSpec(), lone_e2e=0.1, limit={"users": None})
    assert [s.phase for s in result.curve] == ["capacity-16", "capacity-32", "capacity-64"]
    assert "with 1 worker (" in result.detail


def test_step_figures_read_the_worker_count_of_load_json(tmp_path):
    import json

    from rundir_builder import request_records, write_profile

    from gate.orchestrator.capacity_sweep import PROFILE, step_figures
    from gate.rundir.run import load_run

    write_profile(tmp_path, PROFILE, request_records(20))
    path = tmp_path / PROFILE / "load.json"
    load = json.loads(path.read_text())
    assert step_figures(load_run(tmp_path), users=4, seconds=1.0, phase="p").workers == 1
    path.write_text(json.dumps({**load, "workers": 3}))
    assert step_figures(load_run(tmp_path), users=4, seconds=1.0, phase="p").workers == 3
