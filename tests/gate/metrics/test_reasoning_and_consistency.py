"""Reasoning-aware metrics (ttfc, reasoning_tokens) and the answer-consistency metrics on
hand-made records: TTFT stays the first token of either kind, probes are left out of latency
but not of errors, and probe answers are compared with the same probes answered alone."""

import json

import numpy as np
import pytest
from rundir_builder import request_records, write_jsonl, write_manifest, write_profile

from gate.gates.file import loads
from gate.gates.spec import Scope, Settings, Slos
from gate.metrics.consistency import ALONE_RECORDS, compare
from gate.metrics.derive import measure
from gate.metrics.measurements import NoData, Samples, Scalar
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate


def _measure(run_dir, metric, statistic="p50", scope=Scope(), profile="reasoning_mix"):
    run = load_run(run_dir)
    return measure(
        run.profiles[profile], metric, statistic, scope,
        slos=Slos(), settings=Settings(), warmup_seconds=None,
    )  # fmt: skip


def _thinking(records, reasoning_seconds=0.05, content_seconds=0.3, tokens=16):
    for r in records:
        r["first_reasoning_at"] = r["sent_at"] + reasoning_seconds
        r["first_content_at"] = r["sent_at"] + content_seconds
        r["first_token_at"] = r["first_reasoning_at"]
        r["chunk_times"][0] = round(r["first_token_at"], 6)
        r["reasoning_tokens"] = tokens
    return records


def test_ttft_is_the_first_token_of_either_kind_and_ttfc_the_first_answer_token(tmp_path):
    records = _thinking(request_records(4, ttft_seconds=[0.05] * 4, chunks=8))
    plain = request_records(2, ttft_seconds=[0.02, 0.02], start=2000.0)  # written before
    write_profile(tmp_path, "reasoning_mix", records + plain)
    assert _measure(tmp_path, "ttft").values == pytest.approx([0.05] * 4 + [0.02] * 2)
    # an older record (no reasoning fields) has its first answer token at first_token_at
    assert _measure(tmp_path, "ttfc").values == pytest.approx([0.3] * 4 + [0.02] * 2)
    got = _measure(tmp_path, "reasoning_tokens", "mean")
    assert isinstance(got, Samples) and list(got.values[:4]) == [16] * 4


def test_probes_are_load_but_not_latency_while_their_errors_count(tmp_path):
    records = request_records(6, ttft_seconds=[0.1] * 4 + [5.0] * 2, http_status=[200] * 5 + [500])
    for r in records[4:]:
        r["probe"], r["probe_answer"] = 0, "xxxx"
    records[5].update(status="http_error", error="boom", probe_answer=None,
                      first_token_at=None, chunk_times=[], chunk_tokens=[])  # fmt: skip
    write_profile(tmp_path, "reasoning_mix", records)
    assert _measure(tmp_path, "ttft", "max").values == pytest.approx([0.1] * 4)
    assert _measure(tmp_path, "errors", "count").hits == 1  # the failed probe
    assert _measure(tmp_path, "requests", "count").total == 4


def test_compare_gives_the_first_divergence() -> None:
    assert compare("abcdef", "abcdef") is None
    assert compare("abcdef", "abXdef") == 2
    assert compare("abc", "abcdef") == 3


def _probe_records(answers, stage="main", start=1000.0):
    records = request_records(len(answers), stage=stage, start=start)
    for i, (r, answer) in enumerate(zip(records, answers, strict=True)):
        r["id"], r["probe"], r["probe_answer"] = f"0-p{i}", i % 4, answer
    return records


def _alone(run_dir, answers):
    path = run_dir / ALONE_RECORDS
    path.parent.mkdir(parents=True)
    write_jsonl(path, _probe_records(answers, stage="alone"))


def test_answer_mismatch_rate_compares_each_probe_with_its_answer_alone(tmp_path):
    _alone(tmp_path, ["aaaa", "bbbb", "cccc", "dddd"])
    loaded = ["aaaa", "bbbb", "ccXc", "dddd"] * 2
    write_profile(tmp_path, "steady", request_records(5) + _probe_records(loaded))
    got = _measure(tmp_path, "answer_mismatch_rate", "final", profile="steady")
    assert isinstance(got, Scalar) and got.value == pytest.approx(2 / 8) and got.n == 8
    assert "2 of 8 probes differ" in got.note and "character 2 (probe 2" in got.note
    assert "'cccc'" in got.note and "'ccXc'" in got.note
    position = _measure(tmp_path, "answer_divergence_position", "max", profile="steady")
    assert list(position.values) == [2, 2]


def test_without_answers_alone_or_probes_the_consistency_gate_has_no_data(tmp_path):
    write_profile(tmp_path, "steady", request_records(5) + _probe_records(["a"]))
    got = _measure(tmp_path, "answer_mismatch_rate", "final", profile="steady")
    assert isinstance(got, NoData) and "calibration off" in got.reason
    _alone(tmp_path, ["a"])
    write_profile(tmp_path / "other", "steady", request_records(5))
    got = _measure(tmp_path / "other", "answer_mismatch_rate", "final", profile="steady")
    assert isinstance(got, NoData) and "no consistency probes" in got.reason


_GATE = """
version: 1
gates:
  - name: answer_consistency
    metric: answer_mismatch_rate
    fail: "== 0"
"""


@pytest.mark.parametrize(("kind", "status"), [("batchgate", "fail"), ("vllm", "warn")])
def test_a_mismatch_fails_on_the_bundled_server_and_warns_on_a_foreign_one(tmp_path, kind, status):
    _alone(tmp_path, ["aaaa", "bbbb", "cccc", "dddd"])
    write_profile(tmp_path, "steady", request_records(5) + _probe_records(["aaaa", "bXbb"]))
    write_manifest(tmp_path, ["steady"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["target"]["server_kind"] = kind
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    evaluation = evaluate(load_run(tmp_path), loads(_GATE, path="g.yaml"))
    (verdict,) = evaluation.verdicts
    assert verdict.status.value == status, verdict
    assert "1 of 2 probes differ" in verdict.reason
    assert any("warn-only on a foreign target" in n for n in verdict.notes) == (kind != "batchgate")


def test_equal_answers_pass_the_consistency_gate(tmp_path):
    _alone(tmp_path, ["aaaa", "bbbb"])
    write_profile(tmp_path, "steady", request_records(5) + _probe_records(["aaaa", "bbbb"] * 3))
    write_manifest(tmp_path, ["steady"])
    (verdict,) = evaluate(load_run(tmp_path), loads(_GATE, path="g.yaml")).verdicts
    assert verdict.status.value == "pass" and np.isclose(verdict.value, 0.0)
