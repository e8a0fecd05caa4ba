"""report.html: every figure has data (or says why not), the page is self-contained, and the
figures' numbers agree with gate.metrics.derive."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from rundir_builder import GATES_YAML, make_run

from gate.gates.file import loads
from gate.gates.spec import Scope, Settings, Slos
from gate.metrics import derive, measurements
from gate.outputs.files import write_outputs
from gate.outputs.html.report import REPORT_FILE, ReportError, write_report
from gate.outputs.html.series import profile_figures, time_axis
from gate.outputs.html.slices import clip_profile
from gate.rundir.run import load_run
from gate.verdicts.assess import point_value
from gate.verdicts.evaluate import evaluate

FIGURES_PER_PROFILE = 9
_FIGURE_RE = re.compile(
    r'<figure class="plot" id="([^"]+)" data-figure="([^"]+)" data-state="([^"]+)"'
)


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("report") / "run")


@pytest.fixture(scope="module")
def complete_page(complete_run: Path) -> str:
    return write_report(complete_run).read_text(encoding="utf-8")


def _figures(page: str) -> list[tuple[str, str, str]]:
    return _FIGURE_RE.findall(page)


def _figure_block(page: str, anchor: str) -> str:
    start = page.index(f'id="{anchor}"')
    return page[start : page.index("</figure>", start)]


def test_every_figure_has_data_on_a_complete_run(complete_page: str) -> None:
    page = complete_page
    figures = _figures(page)
    assert len(figures) == 2 * FIGURES_PER_PROFILE
    assert [state for _, _, state in figures] == ["data"] * len(figures)
    for anchor, _, _ in figures:
        block = _figure_block(page, anchor)
        assert "<svg" in block and ("<polyline" in block or "<circle" in block), anchor
    assert "no data:" not in page.split('id="gates"')[1].split("</section>", 1)[1]


def test_figures_without_observer_files_say_no_data_and_why(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",), observers=False)
    page = write_report(run_dir).read_text(encoding="utf-8")
    states = {key: state for _, key, state in _figures(page)}
    assert states == {
        "ttft-cdf": "data",
        "itl-cdf": "data",
        "e2e-cdf": "data",
        "rate": "data",
        "rolling-ttft": "data",
        "queue": "no-data",
        "kv": "no-data",
        "memory": "no-data",
        "step": "no-data",
    }
    for key in ("queue", "kv", "memory", "step"):
        block = _figure_block(page, f"steady-{key}")
        reason = re.search(r'<div class="nodata">no data: ([^<]*)</div>', block)
        assert reason is not None and len(reason.group(1).strip()) > 5, key
    assert "no gpu.jsonl sampler records" in _figure_block(page, "steady-memory")


def test_page_is_self_contained(complete_page: str) -> None:
    page = complete_page
    lowered = page.lower()
    for banned in ("<script", "<link", "<img", "<iframe", "src=", "@import", "url("):
        assert banned not in lowered, banned
    assert set(re.findall(r'href="(.)', page)) <= {"#"}  # only in-page anchors
    assert "<style>" in page and "<svg" in page


def test_gate_table_shows_verdicts_thresholds_and_rollback(complete_run: Path) -> None:
    evaluation = evaluate(load_run(complete_run), loads(GATES_YAML))
    evaluation = dataclasses.replace(evaluation, rollback_target="http://127.0.0.1:8000")
    page = write_report(complete_run, evaluation).read_text(encoding="utf-8")
    gates = page.split('id="gates"')[1].split("</section>")[0]
    assert "FAILED (exit 1)" in gates
    row = next(r for r in gates.split("<tr") if "interactive_spike_ttft" in r)
    assert "FAIL" in row and "&lt; 50ms" in row and "knob: <code>max_num_seqs</code>" in row
    assert "batchgate rollback --target http://127.0.0.1:8000 --to safe" in row
    spike = next(v for v in evaluation.verdicts if v.gate == "interactive_spike_ttft")
    assert f'<td class="num">{spike.n}</td>' in row
    assert gates.count("<tr") == 1 + len(evaluation.verdicts)


def test_saved_verdicts_are_used_when_no_evaluation_is_given(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "run", profiles=("steady",))
    missing = write_report(run_dir).read_text(encoding="utf-8")
    assert "no data: no verdicts.json in the run directory" in missing
    evaluation = evaluate(load_run(run_dir), loads(GATES_YAML))
    write_outputs(run_dir, evaluation)
    page = write_report(run_dir).read_text(encoding="utf-8")
    assert "ttft_p99" in page and f"(exit {int(evaluation.exit_code)})" in page


def test_provenance_comes_from_the_manifest(complete_page: str) -> None:
    page = complete_page
    provenance = page.split('id="provenance"')[1]
    for expected in ("0123abc", "batchgate", "model tiny", "bh-1", "synthetic-cpu", "hash-burst"):
        assert expected in provenance, expected


def test_burst_stages_are_shaded_bands_on_time_series(complete_page: str) -> None:
    page = complete_page
    rate = _figure_block(page, "burst-rate")
    assert rate.count('class="band"') == 4  # warm-up, baseline, spike, recovery
    assert ">spike</text>" in rate
    assert 'class="band"' not in _figure_block(page, "steady-ttft-cdf")


def _figure(profile, key):  # type: ignore[no-untyped-def]
    return next(f for f in profile_figures(profile) if f.key == key)


def test_rolling_p99_ttft_rises_in_the_spike_and_comes_back(complete_run: Path) -> None:
    profile = load_run(complete_run).profiles["burst"]
    line = next(ln for ln in _figure(profile, "rolling-ttft").lines if ln.label == "all")
    baseline = np.nanmax(line.y[(line.x > 2) & (line.x < 5.5)])
    spike = np.nanmax(line.y[(line.x > 7) & (line.x < 10)])
    late = np.nanmax(line.y[(line.x > 14) & (line.x < 17.5)])
    assert spike > 3 * baseline
    assert late < spike / 2


def test_cdf_p99_labels_and_rate_counts_agree_with_derive(complete_run: Path) -> None:
    profile = load_run(complete_run).profiles["burst"]
    samples = derive.measure(
        profile, "ttft", "p99", Scope(), slos=Slos(), settings=Settings(), warmup_seconds=None
    )
    assert isinstance(samples, measurements.Samples)
    all_line = _figure(profile, "ttft-cdf").lines[0]
    assert all_line.label.startswith(f"all (n={len(samples.values)},")
    assert all_line.x[-1] == pytest.approx(samples.values.max())
    axis = time_axis(profile)
    assert axis is not None
    sent = next(ln for ln in _figure(profile, "rate").lines if ln.label == "achieved (sent)")
    assert float(np.sum(sent.y) * axis.bin_seconds) == pytest.approx(profile.requests.n)


def test_kv_bins_peak_equals_the_whole_window_peak(complete_run: Path) -> None:
    profile = load_run(complete_run).profiles["burst"]
    whole = derive.measure(
        profile, "kv_usage", "peak", Scope(), slos=Slos(), settings=Settings(), warmup_seconds=0.0
    )
    kv = _figure(profile, "kv").lines[0]
    assert float(np.nanmax(kv.y)) == pytest.approx(point_value(whole, "peak"))


def test_clip_profile_keeps_each_requests_itl_gaps(complete_run: Path) -> None:
    profile = load_run(complete_run).profiles["steady"]
    req = profile.requests
    assert req is not None
    start, end = float(req.sent_at[40]), float(req.sent_at[60])
    piece = clip_profile(profile, start=start, end=end)
    assert piece.requests is not None and piece.requests.n == 20
    offsets = np.concatenate([[0], np.cumsum(req.itl_counts)])
    expected = req.itl_seconds[offsets[40] : offsets[60]]
    np.testing.assert_array_equal(piece.requests.itl_seconds, expected)
    assert piece.steps is not None and len(piece.steps.t)
    low, high = profile.to_wall(start), profile.to_wall(end)
    assert np.all((piece.steps.t >= low) & (piece.steps.t < high))


def test_unreadable_run_directory_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no profile directories"):
        write_report(tmp_path)
    assert not (tmp_path / REPORT_FILE).exists()


def test_svg_breaks_lines_at_gaps_escapes_text_and_keeps_flat_lines_visible() -> None:
    from gate.outputs.html.svg import Band, Chart, Line, render_chart

    chart = Chart(
        x_label="t <s>",
        y_label="queue",
        lines=(
            Line(label="a&b", x=np.arange(6.0), y=np.array([1, 2, np.nan, 3, 4, 5.0])),
            Line(label="flat", x=np.arange(6.0), y=np.zeros(6)),
        ),
        bands=(Band(start=1.0, end=2.0, label="spike"),),
        y_min=0.0,
    )
    svg = render_chart(chart)
    assert svg.count("<polyline") == 3  # the gap splits the first line in two
    assert "t &lt;s&gt;" in svg and "a&amp;b" in svg and "<s>" not in svg
    flat = re.findall(r'points="([^"]+)"', svg)[-1]
    ys = {float(p.split(",")[1]) for p in flat.split()}
    assert len(ys) == 1 and 0 < ys.pop() < 260  # drawn inside the frame, not on a -1..1 axis
    with pytest.raises(ValueError, match="finite point"):
        render_chart(
            dataclasses.replace(chart, lines=(Line(label="x", x=np.zeros(0), y=np.zeros(0)),))
        )
