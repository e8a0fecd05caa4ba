"""The terminal report reads at the width it is printed at: one row a gate with its statistic and
metric when the table fits; otherwise each gate's whole name on its own line (with what it
judges) and its cells below, no line wider than the console. The width is COLUMNS when set,
through a pipe too."""

from __future__ import annotations

import io
import json

from rich.console import Console
from rundir_builder import request_records, write_gates, write_manifest, write_profile

from gate.cli import main
from gate.commands._common import console_width
from gate.errors import ExitCode
from gate.outputs import terminal
from gate.verdicts.verdict import Evaluation, Status, Verdict

PROFILES = ("night_trickle", "chat_sessions", "priority_mix", "offline_job")
NAMES = ("kv_leak_after_drain", "measurement_valid", "chat_during_offline_job", "no_errors")


def _evaluation() -> Evaluation:
    verdicts = [
        Verdict(
            gate=name,
            profile=profile,
            status=Status.PASS if i % 5 else Status.INCONCLUSIVE,
            metric="batch_job_output_tokens_per_second" if i == 3 else "ttft",
            statistic="p99",
            unit="duration",
            scope={},
            value=0.01058,
            threshold="< 4x unloaded = 32.15ms",
            threshold_value=0.03215,
            margin=0.02157,
            n=1400,
            interval=(0.008978, 0.01716),
            key=i == 0,
        )
        for i, (name, profile) in enumerate((n, p) for n in NAMES for p in PROFILES)
    ]
    return Evaluation(verdicts=verdicts, exit_code=ExitCode.PASSED)


def _render(width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    console.print(terminal.render(_evaluation()))
    return console.file.getvalue().splitlines()


def test_at_80_columns_each_gate_takes_two_lines_with_its_whole_name():
    lines = _render(80)
    assert max(len(line) for line in lines) <= 80
    evaluation = _evaluation()
    for verdict in evaluation.verdicts:
        name = ("★ " if verdict.key else "") + verdict.id
        (line,) = [i for i, text in enumerate(lines) if text.startswith(name + "  ")]
        assert lines[line].endswith(f"{verdict.statistic} {verdict.metric}")
        assert "< 4x unloaded" in lines[line + 1]  # the cells on the line below
        assert "[8.978ms, 17.16ms]" in lines[line + 1]  # intervals whole
    # 16 gates: a title, a header, a rule, two lines a gate, a line for each of the 4 that did
    # not pass, and the result line.
    assert len(lines) == 3 + 2 * 16 + 4 + 1


def test_a_narrower_console_shrinks_the_text_columns_and_never_cuts_a_value():
    lines = _render(60)
    assert max(len(line) for line in lines) <= 60
    text = "\n".join(lines)
    assert "…" not in text
    assert "kv_leak_after_drain@chat_sessions" in text


def test_a_wide_console_has_one_row_a_gate_with_what_it_judges():
    lines = _render(200)
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 16
    assert all("p99 ttft" in row or "p99 batch_job_output_tokens_per_second" in row for row in rows)
    assert "judges" in "\n".join(lines[:4])


def test_the_width_is_columns_when_set_in_a_terminal_or_a_pipe():
    assert console_width({"COLUMNS": "80"}, False) == 80
    assert console_width({"COLUMNS": "80"}, True) == 80
    assert console_width({}, False) == 160  # a CI log
    assert console_width({}, True) is None  # the terminal's own width
    assert console_width({"COLUMNS": "wide"}, False) == 160


def test_check_through_a_pipe_follows_columns(tmp_path, monkeypatch, capsys):
    records = request_records(50)
    write_profile(tmp_path, "chat_during_offline_job_profile", records)
    write_manifest(tmp_path, ["chat_during_offline_job_profile"])
    gates = write_gates(
        tmp_path / "g.yaml",
        "version: 1\ngates:\n  - name: a_rather_long_gate_name_for_the_errors\n"
        '    metric: errors\n    statistic: count\n    fail: "== 0"\n',
    )
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["check", "--no-write", "--gates", str(gates), str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in out) <= 40
    assert "a_rather_long_gate_name_for_the_errors@chat_during_offline_job_profile" in "".join(out)
    assert json.dumps(out)  # printable as captured: no terminal control left in
