"""`batchgate sweep` brackets and bisects to the knee and names the gate that binds there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from e2e_support import REPO, assert_no_strays, batchgate_argv, read_json

pytestmark = pytest.mark.slow

# With constant arrivals the steady profile's achieved rate is its offered rate (8 requests per
# point), so a ceiling on the achieved rate puts the knee between 1 and 2 req/s on any machine.
GATES = """\
version: 1
gates:
  - name: rate_ceiling
    metric: achieved_rate
    scope: {profile: steady}
    fail: "< 1.5/s"
  - name: no_errors
    metric: errors
    statistic: count
    fail: "== 0"
"""


def test_sweep_finds_the_knee_and_the_binding_gate(tmp_path: Path) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text(GATES, encoding="utf-8")
    out = tmp_path / "runs"
    result = subprocess.run(
        batchgate_argv(
            "sweep",
            "--profile",
            "steady",
            "--gates",
            str(gates),
            "--out",
            str(out),
            "--min-rate",
            "1",
            "--max-rate",
            "2",
            "--tolerance",
            "0.6",
            "--requests-per-point",
            "8",
            "--calibration",
            "off",
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sweep_dir,) = out.iterdir()
    sweep = read_json(sweep_dir / "sweep.json")
    rates = [p["rate_rps"] for p in sweep["points"]]
    assert rates[:2] == [1.0, 2.0] and rates[2] == 1.5  # bracket by doubling, then bisect
    assert sweep["points"][0]["outcome"] == "pass" and sweep["points"][1]["outcome"] == "fail"
    assert sweep["knee_rps"] in (1.0, 1.5) and sweep["first_failing_rps"] in (1.5, 2.0)
    assert sweep["binding_gate"] == "rate_ceiling@steady"
    assert "binding gate: rate_ceiling@steady" in result.stdout
    for point in sweep["points"]:
        assert (Path(point["run_dir"]) / "verdicts.json").is_file()
    assert_no_strays(sweep_dir)


def test_sweep_with_the_defaults_brackets_the_calibrated_capacity_and_gives_an_answer(
    tmp_path: Path,
) -> None:
    out = tmp_path / "runs"
    result = subprocess.run(
        batchgate_argv(
            "sweep", "--profile", "steady", "--out", str(out), "--requests-per-point", "40"
        ),
        cwd=tmp_path,  # no gates.yaml here: the packaged default gates
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    (sweep_dir,) = out.iterdir()
    sweep = read_json(sweep_dir / "sweep.json")
    calibration = read_json(sweep_dir / "calibration-run" / "calibration.json")
    assert calibration["capacity"]["short"]["rps"] > 0
    # 0.25x .. 2x the calibrated capacity for the profile's mix: three doublings.
    assert sweep["max_rate_rps"] == pytest.approx(8 * sweep["min_rate_rps"])
    assert sweep["points"] and all(p["outcome"] != "inconclusive" for p in sweep["points"])
    assert "knee" in result.stdout or "no passing rate" in result.stdout
    for point in sweep["points"]:
        run_dir = Path(point["run_dir"])
        assert read_json(run_dir / "calibration.json")["source"].startswith("file: ")
        # The bundled server started by the sweep is measured by every point's sampler.
        samples = (run_dir / "steady" / "gpu.jsonl").read_text(encoding="utf-8").splitlines()
        assert any('"source":"process_rss"' in line for line in samples)
    assert_no_strays(sweep_dir)
