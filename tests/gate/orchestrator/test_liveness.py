"""Busy is not dead: a `--target` whose /health fails while answers keep streaming in is busy
(recorded, the run goes on); one that refuses connections, or fails /health with no answer byte
arriving for the stated time, is dead (the profile ends `target_died`, the run exits 5)."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from importlib import resources
from pathlib import Path

import pytest
from fault_target import FaultTarget
from process_scan import processes_mentioning

from gate.gates.file import load
from gate.orchestrator.live import LiveView
from gate.orchestrator.liveness import HealthProbe, Liveness, read_received_bytes
from gate.orchestrator.plan import ProfilePlan, resolve_plans
from gate.orchestrator.session import ProfileOutcome, ProfileSession, SessionSettings
from gate.orchestrator.target import TargetClient

OK = HealthProbe(ok=True, refused=False, latency_seconds=0.01, detail="HTTP 200")
SLOW = HealthProbe(ok=False, refused=False, latency_seconds=2.0, detail="ReadTimeout after 2.0 s")
REFUSED = HealthProbe(ok=False, refused=True, latency_seconds=0.001, detail="ConnectError: refused")


def _rule(no_progress: float = 10.0) -> Liveness:
    return Liveness(failures_for_dead=3, no_progress_seconds=no_progress, started_at=0.0)


def test_failing_health_while_bytes_keep_arriving_is_never_dead() -> None:
    rule = _rule()
    for second in range(1, 120):
        rule.progress(1000 * second, now=float(second))
        assert rule.observe(SLOW, now=float(second)) is None
    summary = rule.summary()
    assert summary["health_failed"] == summary["health_probes"] == 119
    assert summary["health_slow"] == 119 and summary["health_latency_max_seconds"] == 2.0
    assert "busy, not dead" in (rule.busy_line("steady") or "")


def test_failing_health_with_no_progress_for_the_stated_time_is_dead() -> None:
    rule = _rule(no_progress=10.0)
    rule.progress(500, now=1.0)  # the last byte arrived at t=1
    verdicts = [rule.observe(SLOW, now=float(t)) for t in range(2, 12)]
    assert verdicts[:-1] == [None] * 9  # three failures, but bytes arrived < 10 s ago
    assert verdicts[-1] is not None and "no answer byte arrived for 10 s" in verdicts[-1]
    assert "ReadTimeout" in verdicts[-1]


def test_a_count_that_does_not_grow_is_no_progress() -> None:
    rule = _rule(no_progress=5.0)
    for t in range(1, 10):
        rule.progress(500, now=float(t))  # the same count: nothing new arrived
        reason = rule.observe(SLOW, now=float(t))
    assert reason is not None and rule.summary()["progress_seen"] == 1


def test_refused_connections_are_dead_whatever_the_progress() -> None:
    rule = _rule()
    assert rule.observe(REFUSED, now=1.0) is None
    assert rule.observe(REFUSED, now=2.0) is None
    reason = rule.observe(REFUSED, now=3.0)
    assert reason is not None and "refused connections 3 times in a row" in reason


def test_one_good_answer_resets_the_streak() -> None:
    rule = _rule(no_progress=1.0)  # no byte ever arrives: only the streak holds it back
    probes = (SLOW, SLOW, OK, SLOW, SLOW)
    assert [rule.observe(p, now=20.0 + i) for i, p in enumerate(probes)] == [None] * 5
    assert rule.observe(SLOW, now=30.0) is not None  # the third failure in a row since the 200


def test_the_heartbeat_file_is_read_and_a_bad_one_is_no_count(tmp_path: Path) -> None:
    assert read_received_bytes(tmp_path) is None
    (tmp_path / "progress.json").write_text('{"received_bytes": 1234, "records": 3}')
    assert read_received_bytes(tmp_path) == 1234
    (tmp_path / "progress.json").write_text("{half")
    assert read_received_bytes(tmp_path) is None


# -- against fake targets, with the real load process -------------------------------------

GATES = Path(str(resources.files("gate.gates").joinpath("default.yaml")))


def _session(tmp_path: Path, url: str, *, seconds: float, no_progress: float) -> ProfileSession:
    empty = dataclasses.replace(load(GATES), profiles={}, gates=())
    overrides = {
        "duration_seconds": seconds,
        "rate_rps": 4.0,
        "warmup_seconds": 0.0,
        "output_tokens": {"kind": "fixed", "value": 24},
        "request_timeout_seconds": 30.0,
    }
    (plan,) = resolve_plans(["steady"], empty, scale="smoke", extra_overrides={"steady": overrides})
    settings = SessionSettings(
        scale="smoke", no_progress_seconds_for_dead=no_progress, load_stop_timeout_seconds=20.0
    )
    return ProfileSession(
        plan=ProfilePlan(name="steady", overrides=plan.overrides, params=plan.params),
        run_dir=tmp_path / "run",
        target=TargetClient(url),
        server=None,
        has_step_records=False,
        settings=settings,
        view=LiveView(stream=io.StringIO(), tty=False),
        index=1,
        total=1,
    )


def _wait_for_records(path: Path, lines: int, timeout_seconds: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_bytes().splitlines()) >= lines:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path}: fewer than {lines} records in {timeout_seconds:g} s")


def _run_in_thread(session: ProfileSession) -> tuple[threading.Thread, list[ProfileOutcome]]:
    out: list[ProfileOutcome] = []
    thread = threading.Thread(target=lambda: out.append(session.run()), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.slow
def test_a_target_whose_health_stalls_while_it_streams_is_busy_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    target = FaultTarget(itl_seconds=0.05)  # one request streams for ~1.2 s, 4 start a second
    try:
        # /health never answers within the 2 s probe timeout: with the old rule (3 failures
        # in a row) the profile would end `target_died` after about 9 s, well before its 16 s.
        target.set(health_delay_seconds=10.0)
        session = _session(tmp_path, target.url, seconds=16.0, no_progress=6.0)
        outcome = session.run()
    finally:
        target.stop()
        session.target.close()
    assert outcome.fault is None, outcome.fault
    assert outcome.load is not None and outcome.load["ended"] == "completed"
    liveness = outcome.observers["liveness"]
    assert liveness["health_failed"] >= 3 and liveness["health_failed"] == liveness["health_probes"]
    assert liveness["progress_seen"] >= 2
    heartbeat = json.loads((tmp_path / "run" / "steady" / "progress.json").read_text())
    assert heartbeat["received_bytes"] > 0 and heartbeat["records"] == outcome.load["sent_requests"]
    assert not processes_mentioning(str(tmp_path))


@pytest.mark.slow
def test_a_target_that_stops_answering_everything_is_dead(tmp_path: Path) -> None:
    target = FaultTarget()
    try:
        session = _session(tmp_path, target.url, seconds=120.0, no_progress=3.0)
        thread, out = _run_in_thread(session)
        _wait_for_records(tmp_path / "run" / "steady" / "requests.jsonl", 3)
        target.set(freeze=True)  # accepted, never answered: /health and every stream
        thread.join(timeout=90.0)
        assert not thread.is_alive(), "the session did not notice the hung target"
    finally:
        target.stop()
        session.target.close()
    (outcome,) = out
    assert outcome.fault is not None and outcome.fault.ended == "target_died"
    assert "no answer byte arrived for" in outcome.fault.reason
    assert outcome.load is not None and outcome.load["ended"] == "interrupted"
    assert outcome.observers["liveness"]["health_failed"] >= 3
    assert not processes_mentioning(str(tmp_path))


@pytest.mark.slow
def test_a_target_that_refuses_connections_is_dead(tmp_path: Path) -> None:
    target = FaultTarget()
    session = _session(tmp_path, target.url, seconds=120.0, no_progress=60.0)
    thread, out = _run_in_thread(session)
    try:
        _wait_for_records(tmp_path / "run" / "steady" / "requests.jsonl", 3)
    finally:
        target.stop()
    thread.join(timeout=90.0)
    session.target.close()
    assert not thread.is_alive(), "the session did not notice the refusing target"
    (outcome,) = out
    assert outcome.fault is not None and outcome.fault.ended == "target_died"
    assert "refused connections 3 times in a row" in outcome.fault.reason
    assert not processes_mentioning(str(tmp_path))
