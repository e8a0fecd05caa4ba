"""`batchgate compare`'s legend explains both meanings of its `◆` mark (a metric beyond its
noise, a gate whose verdict changed), since both tables use it."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rundir_builder import GATES_YAML, make_run

from gate import compare as compare_mod
from gate.gates.file import loads
from gate.rundir.run import load_run
from gate.verdicts.evaluate import evaluate


def test_the_legend_explains_the_mark_on_metrics_and_on_changed_verdicts(tmp_path: Path) -> None:
    gates = loads(GATES_YAML)
    run_a = load_run(make_run(tmp_path / "a", seed=1))
    run_b = load_run(make_run(tmp_path / "b", seed=3, ttft_scale=2.0, error_share=0.15))
    result = compare_mod.compare(
        run_a, run_b, verdicts_a=evaluate(run_a, gates), verdicts_b=evaluate(run_b, gates)
    )
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(compare_mod.render(result))
    lines = buffer.getvalue().splitlines()
    assert any("◆ larger than noise" in line for line in lines)  # a metric row
    assert any("◆ error_rate@steady" in line for line in lines)  # a changed verdict
    legend = " ".join(line for line in lines if line.lstrip().startswith("◆ marks"))
    assert "larger than its noise" in legend and "verdict changed" in legend
