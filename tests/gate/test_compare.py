"""`gate.compare` and `batchgate compare`: deltas, their noise, verdicts, JSON and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from rundir_builder import GATES_YAML, make_run

from gate import compare as compare_mod
from gate.cli import main
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    return {
        "a": make_run(root / "a", seed=1),
        "a_again": make_run(root / "a_again", seed=1),
        "other_seed": make_run(root / "other_seed", seed=2),
        "slow": make_run(root / "slow", seed=3, ttft_scale=2.0, error_share=0.15),
    }


def _rows(comparison: compare_mod.Comparison, profile: str) -> dict[str, compare_mod.MetricRow]:
    return {r.label: r for r in comparison.metrics if r.profile == profile}


def test_identical_runs_have_zero_deltas_and_nothing_beyond_noise(runs) -> None:
    result = compare_mod.compare(load_run(runs["a"]), load_run(runs["a_again"]))
    assert result.profiles == ("burst", "steady")
    assert len(result.metrics) == 2 * len(compare_mod.KEY_METRICS)
    for row in result.metrics:
        assert row.delta == 0.0, row.label
        assert row.noise != compare_mod.LARGER, row.label


def test_same_settings_other_seed_stays_within_noise_for_percentiles(runs) -> None:
    result = compare_mod.compare(load_run(runs["a"]), load_run(runs["other_seed"]))
    steady = _rows(result, "steady")
    for label in ("TTFT p50", "E2E p50", "ITL p50", "throughput (ok req/s)"):
        assert steady[label].noise == compare_mod.WITHIN, label
        assert steady[label].delta != 0.0, label  # different samples, same distribution
    assert steady["error rate"].noise == compare_mod.WITHIN  # 0 of n both times


def test_slower_run_is_marked_worse_beyond_noise(runs) -> None:
    result = compare_mod.compare(load_run(runs["a"]), load_run(runs["slow"]))
    steady = _rows(result, "steady")
    for label in ("TTFT p50", "E2E p50", "ITL p50", "ITL p99"):
        row = steady[label]
        assert row.noise == compare_mod.LARGER and row.worse is True, label
        assert row.delta_ratio == pytest.approx(1.0, abs=0.35)  # latency doubled
    errors = steady["error rate"]
    assert errors.method == "Clopper–Pearson" and errors.noise == compare_mod.LARGER
    assert errors.a.low == 0.0 and errors.b.low > 0.0
    assert steady["memory peak"].noise == compare_mod.NO_MODEL
    # ~360 ok requests are too few for a two-sided 95 % bound on p99 (that needs ~370).
    ttft_p99 = steady["TTFT p99"]
    assert ttft_p99.method == "order-statistic interval"
    assert ttft_p99.noise == compare_mod.TOO_FEW and ttft_p99.b.high is None


def test_throughput_interval_is_a_poisson_count_interval(runs) -> None:
    result = compare_mod.compare(load_run(runs["a"]), load_run(runs["slow"]))
    row = _rows(result, "steady")["throughput (ok req/s)"]
    assert row.method.startswith("Poisson")
    assert row.a.low < row.a.value < row.a.high
    # 1.96 sqrt(k) / T either side for a 95 % two-sided interval.
    seconds = row.a.n / row.a.value
    assert (row.a.high - row.a.value) * seconds == pytest.approx(1.96 * row.a.n**0.5, rel=0.01)


def test_verdicts_are_joined_by_id_and_changes_flagged(runs) -> None:
    gates = loads(GATES_YAML)
    run_a, run_b = load_run(runs["a"]), load_run(runs["slow"])
    result = compare_mod.compare(
        run_a, run_b, verdicts_a=evaluate(run_a, gates), verdicts_b=evaluate(run_b, gates)
    )
    by_id = {v.id: v for v in result.verdicts}
    assert set(by_id) == {v.id for v in evaluate(run_a, gates).verdicts}
    assert by_id["error_rate@steady"].a_status == "pass"
    assert by_id["error_rate@steady"].b_status == "fail"
    assert by_id["error_rate@steady"].changed
    assert not by_id["interactive_spike_ttft@burst"].changed


def test_rich_table_renders_at_fixed_width(runs) -> None:
    result = compare_mod.compare(load_run(runs["a"]), load_run(runs["slow"]))
    buffer = io.StringIO()
    Console(file=buffer, width=140, color_system=None).print(compare_mod.render(result))
    text = buffer.getvalue()
    assert "profile burst" in text and "profile steady" in text
    assert "TTFT p99" in text and "◆ larger than noise" in text and "within noise" in text
    assert "no verdicts for run A and B" in text
    error_line = next(line for line in text.splitlines() if "error rate" in line)
    assert " pp" in error_line  # a change of a share is in percentage points


def test_compare_command_json(runs, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["a"]), str(runs["slow"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["profiles"] == ["burst", "steady"]
    row = next(m for m in data["metrics"] if m["profile"] == "steady" and m["label"] == "TTFT p50")
    assert row["noise"] == "larger than noise" and row["b_worse"] is True
    assert row["a"]["interval"][0] < row["a"]["value"] < row["a"]["interval"][1]


def test_compare_command_with_gates_prints_verdicts(
    runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES_YAML, encoding="utf-8")
    assert main(["compare", str(runs["a"]), str(runs["slow"]), "--gates", str(gates)]) == 0
    out = capsys.readouterr().out
    assert "verdicts" in out and "◆ error_rate@steady" in out


def test_compare_bad_input_exit_codes(
    runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = str(runs["a"])
    assert main(["compare", a, str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["compare", a, str(tmp_path / "empty")]) == 5
    assert "not a readable run" in capsys.readouterr().err
    only_burst = make_run(tmp_path / "burst_only", profiles=("burst",))
    steady_only = make_run(tmp_path / "steady_only", profiles=("steady",))
    assert main(["compare", str(only_burst), str(steady_only)]) == 5
    assert "no profile in common" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\n", encoding="utf-8")
    assert main(["compare", a, a, "--gates", str(bad)]) == 4
    assert main(["compare", a, a, "--confidence", "1.5"]) == 2
