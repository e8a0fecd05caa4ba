"""JUnit parsed back, Markdown summary and annotations, and the terminal report as fixed text."""

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console

from gate.errors import ExitCode
from gate.outputs import junit, summary, terminal
from gate.outputs.files import read_verdicts, write_outputs
from gate.verdicts.verdict import Evaluation, Status, Verdict


def _verdict(gate, status, **kwargs):
    base = dict(
        gate=gate,
        profile="steady",
        status=status,
        metric="ttft",
        statistic="p99",
        unit="duration",
        scope={},
    )
    base.update(kwargs)
    return Verdict(**base)


EVALUATION = Evaluation(
    verdicts=[
        _verdict(
            "ttft_p99",
            Status.FAIL,
            value=1.2,
            threshold="< 800ms",
            threshold_value=0.8,
            margin=-0.4,
            n=1000,
            interval=(1.1, 1.4),
            key=True,
            knob="interactive.max_wait_ms",
            rollback="safe",
            reason="40 of 1000 samples on the wrong side",
        ),
        _verdict(
            "errors",
            Status.PASS,
            metric="errors",
            statistic="mean",
            unit="ratio",
            value=0.002,
            threshold="< 1%",
            threshold_value=0.01,
            margin=0.008,
            n=1000,
            interval=(0.0002, 0.007),
        ),
        _verdict(
            "e2e_reg",
            Status.INCONCLUSIVE,
            metric="e2e",
            statistic="p90",
            reason="baseline 'main' is not comparable: model differs (baseline tiny, run big)",
        ),
        _verdict("step", Status.NO_DATA, metric="step_latency", reason="no step records"),
        _verdict(
            "mem",
            Status.WARN,
            metric="memory_used",
            statistic="peak",
            unit="bytes",
            value=0.85,
            threshold="< 90%",
            threshold_value=0.9,
            margin=0.05,
            n=20,
            of_total=True,
            monitor=True,
        ),
    ],
    exit_code=ExitCode.FAILED,
    run_path="runs/x",
    gates_file="gates.yaml",
    rollback_target="http://127.0.0.1:8000",
    notes=("steady: requests.jsonl: skipped a partial last line",),
)


def test_junit_has_one_testcase_per_gate_with_the_right_outcome():
    root = ET.fromstring(junit.to_xml(EVALUATION))
    suite = root.find("testsuite")
    assert suite.attrib == {
        "name": "batchgate",
        "tests": "5",
        "failures": "1",
        "errors": "1",
        "skipped": "1",
    }
    cases = {c.attrib["name"]: c for c in suite.findall("testcase")}
    failure = cases["ttft_p99@steady"].find("failure")
    assert "p99 ttft = 1.2s" in failure.attrib["message"]
    assert "threshold < 800ms" in failure.attrib["message"]
    assert "n=1000" in failure.attrib["message"]
    assert "95% interval [1.1s, 1.4s]" in failure.attrib["message"]
    assert (
        "batchgate rollback --target http://127.0.0.1:8000 --to safe" in failure.attrib["message"]
    )
    assert cases["step@steady"].find("error").attrib["type"] == "no_data"
    assert "model differs" in cases["e2e_reg@steady"].find("skipped").attrib["message"]
    assert cases["errors@steady"].find("failure") is None
    assert cases["mem@steady"].find("failure") is None  # monitors never fail


def test_markdown_summary_puts_key_gates_first_and_gives_the_rollback():
    text = summary.to_markdown(EVALUATION)
    assert text.startswith("## batchgate: FAILED (exit 1)\n")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| **ttft_p99@steady** | ❌ fail | 1.2s | < 800ms | -400ms |")
    assert "`batchgate rollback --target http://127.0.0.1:8000 --to safe`" in text
    assert "skipped a partial last line" in text


def test_annotations_are_errors_for_failures_and_warnings_otherwise():
    lines = summary.annotations(EVALUATION)
    assert lines[0].startswith("::error title=gate ttft_p99@steady: fail::p99 ttft = 1.2s")
    levels = {line.split(" ", 1)[0] for line in lines}
    assert levels == {"::error", "::warning"}
    assert sum(line.startswith("::error") for line in lines) == 2  # fail + no data
    assert all("\n" not in line for line in lines)


def test_write_outputs_writes_every_artifact_and_appends_the_step_summary(tmp_path):
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    written = write_outputs(tmp_path, EVALUATION, env={"GITHUB_STEP_SUMMARY": str(step_summary)})
    assert {p.name for p in written} == {
        "verdicts.json",
        "junit.xml",
        "summary.md",
        "step_summary.md",
    }
    assert step_summary.read_text().startswith("earlier step\n## batchgate: FAILED")
    data = json.loads((tmp_path / "verdicts.json").read_text())
    assert data["schema_version"] == 1 and data["exit_code"] == 1
    assert data["verdicts"][2]["interval"] is None
    back = read_verdicts(tmp_path / "verdicts.json")
    assert back.verdicts == EVALUATION.verdicts
    assert back.exit_code is ExitCode.FAILED


# Regenerate after an intended layout change by writing _render() to this file and reviewing it.
EXPECTED_TERMINAL = (Path(__file__).parent / "test_outputs_terminal.expected.txt").read_text(
    encoding="utf-8"
)


def _render() -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None, legacy_windows=False)
    console.print(terminal.render(EVALUATION))
    return console.file.getvalue()


def test_terminal_report_renders_to_fixed_text():
    assert _render() == EXPECTED_TERMINAL
