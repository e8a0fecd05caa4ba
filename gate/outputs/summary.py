"""The Markdown summary (for summary.md and $GITHUB_STEP_SUMMARY) and GitHub annotation lines.

Owns the wording and layout of both; key gates come first. It does not write files (see
`gate.verdicts.write_outputs`) or decide verdicts.
"""

from gate.outputs.text import (
    describe,
    format_delta,
    format_interval,
    format_margin,
    format_verdict_value,
    rollback_line,
)
from gate.verdicts.verdict import Evaluation, Status, Verdict

__all__ = ["annotations", "ordered", "to_markdown"]

_ICON = {
    Status.PASS: "✅ pass",
    Status.WARN: "⚠️ warn",
    Status.FAIL: "❌ fail",
    Status.INCONCLUSIVE: "❔ inconclusive",
    Status.NO_DATA: "⛔ no data",
}
_RESULT = {
    0: "passed",
    1: "FAILED",
    3: "inconclusive",
    5: "no data / invalid measurement",
}


def ordered(evaluation: Evaluation) -> list[Verdict]:
    """Key gates first, then file order (stable)."""
    return sorted(evaluation.verdicts, key=lambda v: not v.key)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(evaluation: Evaluation) -> str:
    code = int(evaluation.exit_code)
    counts = evaluation.counts()
    lines = [
        f"## batchgate: {_RESULT.get(code, 'error')} (exit {code})",
        "",
        " · ".join(f"{n} {status}" for status, n in counts.items() if n),
        "",
        "| gate | verdict | value | threshold | margin | interval | n | vs baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for verdict in ordered(evaluation):
        name = f"**{verdict.id}**" if verdict.key else verdict.id
        status = _ICON[verdict.status] + (" (monitor)" if verdict.monitor else "")
        cells = [
            name,
            status,
            format_verdict_value(verdict),
            verdict.threshold or "—",
            format_margin(verdict),
            format_interval(verdict),
            str(verdict.n),
            format_delta(verdict),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    problems = [v for v in ordered(evaluation) if v.status is not Status.PASS]
    if problems:
        lines += ["", "### Details", ""]
        for verdict in problems:
            lines.append(
                f"- **{verdict.id}** ({verdict.status.value}): "
                + _cell(describe(verdict, evaluation))
            )
            command = rollback_line(verdict, evaluation)
            if command and verdict.status is Status.FAIL and not verdict.monitor:
                lines.append(f"  - rollback: `{command}`")
    if evaluation.notes:
        lines += ["", "### Notes", "", *(f"- {_cell(note)}" for note in evaluation.notes)]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    # GitHub workflow commands: %, CR and LF must be escaped in the message.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def annotations(evaluation: Evaluation) -> list[str]:
    """`::error` for failures and no data, `::warning` for warnings and inconclusive verdicts."""
    lines = []
    for verdict in ordered(evaluation):
        if verdict.status is Status.PASS:
            continue
        level = (
            "error"
            if verdict.status in (Status.FAIL, Status.NO_DATA) and not verdict.monitor
            else "warning"
        )
        title = (
            _escape(f"gate {verdict.id}: {verdict.status.value}")
            .replace(",", "%2C")
            .replace("::", ": ")
        )
        lines.append(f"::{level} title={title}::{_escape(describe(verdict, evaluation))}")
    return lines
