"""The files an evaluation becomes: verdicts.json (written atomically), junit.xml, summary.md,
and the GitHub step summary.

Owns `write_outputs`, the one call that writes every CI artifact of a run directory, and reading
verdicts.json back. It does not decide verdicts (`gate.verdicts`) or print (`gate.commands`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gate.outputs import junit, summary
from gate.verdicts.verdict import Evaluation

__all__ = ["read_verdicts", "write_outputs", "write_verdicts"]


def write_verdicts(path: str | Path, evaluation: Evaluation) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(evaluation.to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)  # readers never see half a file


def read_verdicts(path: str | Path) -> Evaluation:
    """The evaluation a verdicts.json holds. Raises OSError, or ValueError for a file that is
    not JSON or not a verdicts file of this schema (whatever field of it is of the wrong shape)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    try:
        return Evaluation.from_dict(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a verdicts file ({type(exc).__name__}: {exc})") from None


def write_outputs(
    run_dir: str | Path, evaluation: Evaluation, *, env: dict[str, str] | None = None
) -> list[Path]:
    """Write verdicts.json, junit.xml, summary.md; append to $GITHUB_STEP_SUMMARY when set."""
    run_dir = Path(run_dir)
    env = dict(os.environ) if env is None else env
    written = [run_dir / "verdicts.json", run_dir / "junit.xml", run_dir / "summary.md"]
    write_verdicts(written[0], evaluation)
    written[1].write_text(junit.to_xml(evaluation), encoding="utf-8")
    markdown = summary.to_markdown(evaluation)
    written[2].write_text(markdown, encoding="utf-8")
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")
        written.append(Path(step_summary))
    return written
