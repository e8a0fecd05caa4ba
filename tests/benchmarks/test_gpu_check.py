"""benchmarks/gpu_check.py without a GPU: the roofline arithmetic and spec table, the section
runner's time budgets (on a fake clock), the table, the summaries of the gpu tests and the smoke
run, the CPU sections in --quick form, and the command's no-CUDA and --device cpu paths.
Nothing here asserts a speed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rundir_builder import request_records, write_manifest, write_profile

from benchmarks import gpu_check, gpu_sections
from reference_server.model_config import get_preset

REPO = Path(__file__).resolve().parents[2]

# -- the roofline ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "bytes_per_second"),
    [
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H200 NVL", 4.8e12),
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 NVL", 3.9e12),
        ("NVIDIA A100-SXM4-80GB", 2.039e12),
        ("NVIDIA A100 80GB PCIe", 1.935e12),
        ("NVIDIA A100-SXM4-40GB", 1.555e12),
        ("NVIDIA A100-PCIE-40GB", 1.555e12),
        ("NVIDIA L40S", 0.864e12),
        ("NVIDIA L4", 0.3e12),
        ("NVIDIA A10G", 0.6e12),
        ("NVIDIA GeForce RTX 4090", 1.008e12),
    ],
)
def test_device_names_find_their_spec_bandwidth(name, bytes_per_second):
    value, label = gpu_check.peak_bandwidth(name)
    assert value == bytes_per_second
    assert "B/s" in label


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA A100-SXM4", "Tesla T4", ""])
def test_an_unknown_or_ambiguous_device_gets_no_bandwidth_and_a_reason(name):
    value, reason = gpu_check.peak_bandwidth(name)
    assert value is None
    assert "not in the spec table" in reason and repr(name) in reason


@pytest.mark.parametrize("name", ["NVIDIA H200 MIG 3g.71gb", "NVIDIA A100-SXM4-80GB MIG 1g.10gb"])
def test_a_mig_slice_gets_no_bandwidth_not_its_whole_gpus(name):
    value, reason = gpu_check.peak_bandwidth(name)
    assert value is None
    assert "MIG slice" in reason and repr(name) in reason


def test_decode_bytes_are_every_weight_plus_every_context_tokens_kv():
    config = get_preset("1b")
    # 2 bytes (bf16): weights once, K and V of 22 layers x 4 kv heads x 64 dims per token.
    expected = config.num_parameters() * 2 + (100 + 300) * (2 * 22 * 4 * 64 * 2)
    got = gpu_check.decode_bytes_per_step(config, dtype_bytes=2, context_lens=[100, 300])
    assert got == expected


def test_roofline_ratio_is_measured_over_the_bandwidth_bound_ceiling():
    roof = gpu_check.roofline_values(
        batch=4, tokens_per_second=1000.0, bytes_per_step=10**9, bandwidth=1e12
    )
    # 1 GB per step at 1 TB/s: 1000 steps/s, 4 tokens each.
    assert roof["roofline_tokens_per_second"] == pytest.approx(4000.0)
    assert roof["roofline_ratio"] == pytest.approx(0.25)
    assert roof["achieved_bytes_per_second"] == pytest.approx(0.25e12)
    unknown = gpu_check.roofline_values(
        batch=4, tokens_per_second=1000.0, bytes_per_step=10**9, bandwidth=None
    )
    assert unknown["roofline_ratio"] is None and unknown["roofline_tokens_per_second"] is None


# -- the section runner ----------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _specs(*budgets: float) -> list[gpu_check.SectionSpec]:
    return [
        gpu_check.SectionSpec(name=f"s{i}", budget_seconds=b, quick_budget_seconds=b / 10)
        for i, b in enumerate(budgets)
    ]


def test_each_section_gets_its_budget_capped_by_what_is_left_then_not_run():
    clock, given = FakeClock(), []

    def launch(spec, budget):  # every section uses its whole budget and is killed
        given.append((spec.name, budget))
        clock.now += budget
        return gpu_check.Launched(rows=[], exit_code=None, timed_out=True, output_tail="")

    rows, timings = gpu_check.run_sections(
        _specs(100, 100, 100, 100), total_seconds=250, quick=False, launch=launch, clock=clock
    )
    assert given == [("s0", 100), ("s1", 100), ("s2", 50)]
    assert [(r["section"], r["status"]) for r in rows] == [
        ("s0", "failed"),
        ("s1", "failed"),
        ("s2", "failed"),
        ("s3", "not run"),
    ]
    assert "killed at its 50 s budget" in rows[2]["note"]
    assert "out of time" in rows[3]["note"]
    assert clock.now - 1000.0 == 250  # never past the total
    assert [t["budget_seconds"] for t in timings] == [100, 100, 50, 0.0]


def test_quick_budgets_apply_with_quick():
    given = []

    def launch(spec, budget):
        given.append(budget)
        row = gpu_check.make_row(spec.name, "c", "ok")
        return gpu_check.Launched(rows=[row], exit_code=0, timed_out=False, output_tail="")

    gpu_check.run_sections(
        _specs(200, 300), total_seconds=1000, quick=True, launch=launch, clock=FakeClock()
    )
    assert given == [20, 30]


def test_a_crashed_or_silent_section_fails_in_its_row_and_the_rest_still_run():
    outcomes = iter(
        [
            gpu_check.Launched(rows=[], exit_code=1, timed_out=False, output_tail="a\nboom\n"),
            gpu_check.Launched(rows=[], exit_code=0, timed_out=False, output_tail=""),
            RuntimeError("launcher broke"),
            gpu_check.Launched(
                rows=[gpu_check.make_row("s3", "case", "ok", measured="5 tok/s")],
                exit_code=0,
                timed_out=False,
                output_tail="",
            ),
        ]
    )

    def launch(spec, budget):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    rows, _ = gpu_check.run_sections(
        _specs(10, 10, 10, 10), total_seconds=100, quick=False, launch=launch, clock=FakeClock()
    )
    assert [r["status"] for r in rows] == ["failed", "failed", "failed", "ok"]
    assert rows[0]["note"] == "exit 1: a | boom"
    assert rows[1]["note"] == "no rows"
    assert "launcher broke" in rows[2]["note"]
    assert gpu_check.exit_code_for(rows) == 1
    assert gpu_check.exit_code_for(rows[3:]) == 0


def test_skipped_and_not_run_rows_do_not_fail_the_check():
    rows = [
        gpu_check.make_row("a", "x", "skipped"),
        gpu_check.make_row("b", "y", "not run"),
        gpu_check.make_row("c", "z", "ok"),
    ]
    assert gpu_check.exit_code_for(rows) == 0
    with pytest.raises(ValueError, match="status"):
        gpu_check.make_row("a", "x", "passed")


def test_a_command_past_its_timeout_is_terminated_then_killed_with_its_group():
    started = time.monotonic()
    code, timed_out, _ = gpu_check.run_command(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(15, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(60)",
        ],
        timeout_seconds=2.0,
        grace_seconds=1.0,
        own_group=True,
    )
    assert timed_out and code is None
    assert time.monotonic() - started < 30  # nowhere near the 60 s the command wanted


def test_a_command_that_finishes_reports_its_code_and_output():
    code, timed_out, tail = gpu_check.run_command(
        [sys.executable, "-c", "print('hello'); raise SystemExit(3)"],
        timeout_seconds=60,
        grace_seconds=5,
    )
    assert (code, timed_out) == (3, False)
    assert "hello" in tail


# -- the table -------------------------------------------------------------------------------


def test_the_table_aligns_columns_and_puts_the_note_last():
    rows = [
        gpu_check.make_row(
            "decode",
            "1b batch 64",
            "ok",
            measured="9,000 tok/s",
            reference="roofline 30,000 tok/s",
            ratio=0.30012,
            note="H200 (SXM and NVL): 4.8 TB/s",
        ),
        gpu_check.make_row("smoke", "batchgate run", "failed", note="exit 1"),
    ]
    lines = gpu_check.format_table(rows).splitlines()
    assert lines[0].split() == [
        "section",
        "case",
        "status",
        "measured",
        "reference",
        "ratio",
        "note",
    ]
    assert set(lines[1]) == {"-"}
    status_at = lines[0].index("status")
    assert lines[2][status_at:].startswith("ok ") and lines[3][status_at:].startswith("failed ")
    assert " 0.3 " in lines[2] and lines[2].endswith("4.8 TB/s")
    assert lines[3].endswith("exit 1")


# -- summaries -------------------------------------------------------------------------------

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="1" skipped="1" tests="4"><testcase classname="t.a" name="test_ok"/>
<testcase classname="t.a" name="test_ok2"/><testcase classname="t.b" name="test_bad">
<failure message="assert 0">x</failure></testcase><testcase classname="t.c" name="test_nvml">
<skipped type="pytest.skip" message="no NVML here">s</skipped></testcase></testsuite></testsuites>
"""


def test_junit_summary_counts_and_names_failures_and_skip_reasons(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    summary = gpu_sections.summarize_junit(path)
    assert (summary["tests"], summary["failures"], summary["errors"], summary["skipped"]) == (
        4,
        1,
        0,
        1,
    )
    assert summary["failed_tests"] == ["t.b::test_bad"]
    assert summary["skip_reasons"] == ["no NVML here"]


def _gpu_record(source: str, used: int, total: int | None) -> dict:
    return {
        "t": 1.0,
        "source": source,
        "device": 0,
        "memory_used_bytes": used,
        "memory_total_bytes": total,
        "note": None,
    }


def _smoke_dir(tmp_path: Path, source: str, *, fail: bool = False) -> Path:
    run_dir = tmp_path / "run"
    write_manifest(run_dir, ["burst", "night_trickle"])
    gib = 1024**3
    write_profile(
        run_dir,
        "burst",
        request_records(3, profile="burst"),
        gpu=[_gpu_record(source, 2 * gib, 100 * gib)],
    )
    write_profile(
        run_dir,
        "night_trickle",
        request_records(3, profile="night_trickle"),
        gpu=[_gpu_record(source, 5 * gib, 100 * gib)],
    )
    verdicts = [
        {"gate": "ttft_p99", "status": "fail" if fail else "pass"},
        {"gate": "kv_leak", "status": "pass"},
    ]
    counts = {"pass": 2 - fail, "fail": int(fail), "no_data": 0}
    (run_dir / "verdicts.json").write_text(json.dumps({"counts": counts, "verdicts": verdicts}))
    return run_dir


def test_smoke_summary_reports_gates_and_the_nvml_peak(tmp_path):
    run_dir = _smoke_dir(tmp_path, "nvml")
    row = gpu_sections.summarize_smoke_run(
        run_dir, exit_code=0, timed_out=False, output_tail="", expect_nvml=True
    )
    assert row["status"] == "ok"
    assert row["measured"] == "exit 0: 2 pass, 0 fail, 0 no data"
    assert row["reference"] == "peak 5.00 GiB of 100 GiB"
    assert row["ratio"] == pytest.approx(0.05)
    assert row["data"]["sampler_sources"] == ["nvml"]


def test_smoke_summary_fails_on_a_failed_gate_or_a_sampler_that_was_not_nvml(tmp_path):
    row = gpu_sections.summarize_smoke_run(
        _smoke_dir(tmp_path, "process_rss", fail=True),
        exit_code=1,
        timed_out=False,
        output_tail="",
        expect_nvml=True,
    )
    assert row["status"] == "failed"
    assert "failed gates: ttft_p99" in row["note"]
    assert "expected nvml only" in row["note"] and "exit 1" in row["note"]


def test_smoke_summary_of_a_run_that_never_started_keeps_its_output(tmp_path):
    row = gpu_sections.summarize_smoke_run(
        tmp_path / "missing",
        exit_code=2,
        timed_out=False,
        output_tail="usage: bad flag",
        expect_nvml=True,
    )
    assert row["status"] == "failed" and row["measured"] == "exit 2"
    assert "usage: bad flag" in row["note"]


# -- the sections on the CPU (--quick) ---------------------------------------------------------


def _ctx(tmp_path: Path, seconds: float = 300.0) -> gpu_sections.Context:
    return gpu_sections.Context(
        device="cpu",
        quick=True,
        deadline=gpu_check.Deadline(time.monotonic() + seconds),
        work_dir=tmp_path,
        runs_dir=tmp_path / "runs",
    )


def test_quick_decode_rows_carry_throughput_and_no_made_up_roofline(tmp_path):
    rows = list(gpu_sections.run_decode(_ctx(tmp_path)))
    assert [r["case"] for r in rows] == ["tiny batch 1", "tiny batch 8"]
    for row in rows:
        assert row["status"] == "ok", row["note"]
        assert row["data"]["tokens_per_second"] > 0 and row["data"]["bytes_per_step"] > 0
        assert row["reference"] == "n/a" and row["ratio"] is None
        assert "roofline n/a: cpu" in row["note"]


def test_quick_mixed_compares_continuous_with_static(tmp_path):
    rows = list(gpu_sections.run_mixed(_ctx(tmp_path)))
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"], [r["note"] for r in rows]
    cont, static, ratio = rows
    assert ratio["ratio"] == pytest.approx(
        cont["data"]["output_tokens_per_second"] / static["data"]["output_tokens_per_second"]
    )


def test_a_spent_deadline_reports_every_case_not_run(tmp_path):
    rows = list(gpu_sections.run_decode(_ctx(tmp_path, seconds=0.0)))
    rows += list(gpu_sections.run_mixed(_ctx(tmp_path, seconds=0.0)))
    assert rows and all(r["status"] == "not run" for r in rows)
    assert all("out of time" in r["note"] for r in rows)


def test_cpu_only_sections_say_they_were_skipped(tmp_path):
    for run in (gpu_sections.run_gpu_tests, gpu_sections.run_smoke, gpu_sections.run_memory):
        (row,) = run(_ctx(tmp_path))
        assert row["status"] == "skipped" and row["note"]


# -- the command -----------------------------------------------------------------------------


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_cuda_it_says_so_and_exits_0_writing_nothing(tmp_path):
    if gpu_check.probe_device("auto").get("cuda"):
        pytest.skip("CUDA is here: the command would run the whole check")
    out = tmp_path / "gpu_check.json"
    done = _command("--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    assert not out.exists()


def test_device_cpu_quick_runs_children_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = _command(
        "--device", "cpu", "--quick", "--sections", "gpu_tests,smoke", "--out", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "section   case" in done.stdout and "exit 0" in done.stdout
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["quick"] is True and report["exit_code"] == 0
    assert [(r["section"], r["status"]) for r in report["rows"]] == [
        ("gpu_tests", "skipped"),
        ("smoke", "skipped"),
    ]
    assert [t["section"] for t in report["sections"]] == ["gpu_tests", "smoke"]
