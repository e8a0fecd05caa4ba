"""report.html: one self-contained page per run (inline CSS and SVG, no script, no network).

Owns the page's order and the one public call, `write_report(run_dir, evaluation=None)`, which
`batchgate run` and `batchgate report` use: gate verdicts (from the evaluation given, else the
run's verdicts.json), per profile the load summary and every figure of `gate.outputs.html.series`,
the run's notes, and provenance from manifest.json. It does not evaluate gates or print anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import html
import os
from pathlib import Path

from gate.errors import BatchgateError, ExitCode
from gate.outputs.files import read_verdicts
from gate.outputs.html.capacity import capacity_section
from gate.outputs.html.page import (
    STYLE,
    figure_html,
    gate_table,
    key_value_table,
    load_table,
    notes_list,
)
from gate.outputs.html.series import profile_figures
from gate.rundir.run import RunData, RunDirError, load_run
from gate.verdicts.verdict import Evaluation

__all__ = ["ReportError", "render_report", "write_report"]

REPORT_FILE = "report.html"
_RESULT = {0: ("PASSED", "pass"), 1: ("FAILED", "fail"), 3: ("INCONCLUSIVE", "inconclusive")}


class ReportError(BatchgateError, ValueError):
    """A run directory the report cannot be made from (the message says why)."""

    default_exit_code = ExitCode.USAGE


def _e(value: object) -> str:
    return html.escape("—" if value is None else str(value))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def _verdicts_section(evaluation: Evaluation | None, missing_reason: str | None) -> str:
    if evaluation is None:
        return (
            '<section id="gates"><h2>Gate verdicts</h2><p class="nodata">no data: '
            f"{_e(missing_reason)}</p></section>"
        )
    code = int(evaluation.exit_code)
    text, cls = _RESULT.get(code, ("NO DATA / INVALID MEASUREMENT", "no_data"))
    counts = " · ".join(f"{n} {status}" for status, n in evaluation.counts().items() if n)
    source = f"gates file {_e(evaluation.gates_file)}" if evaluation.gates_file else ""
    if evaluation.baseline:
        source += f"; baseline {_e(evaluation.baseline)}"
    return (
        f'<section id="gates"><h2>Gate verdicts</h2><p><span class="result {cls}">{text}'
        f" (exit {code})</span> {_e(counts)}"
        f"{' — ' + source if source else ''}; confidence {evaluation.confidence:.0%},"
        f" inconclusive counts as {_e(evaluation.inconclusive_policy)}</p>"
        f"{gate_table(evaluation)}{notes_list(evaluation.notes)}</section>"
    )


def _profile_section(run: RunData, name: str) -> str:
    profile = run.profiles[name]
    anchor = _slug(name)
    parts = [f'<section class="profile" id="profile-{anchor}"><h2>Profile {_e(name)}</h2>']
    parts.append(load_table(profile.load))
    parts.append(notes_list(profile.notes))
    parts.append('<div class="figures">')
    for figure in profile_figures(profile):
        parts.append(figure_html(figure, anchor=f"{anchor}-{figure.key}"))
    parts.append("</div></section>")
    return "".join(parts)


def _provenance_section(run: RunData) -> str:
    manifest = run.manifest
    if manifest is None:
        return (
            '<section id="provenance"><h2>Provenance</h2><p class="nodata">no data: '
            "manifest.json missing, provenance unknown</p></section>"
        )
    tool = manifest.get("tool") or {}
    target = manifest.get("target") or {}
    hardware = manifest.get("hardware") or {}
    pairs = [
        ("tool", f"batchgate {tool.get('version')} ({tool.get('git_sha')})"),
        ("target", f"{target.get('url')} — {target.get('server_kind')}, "
                   f"model {target.get('model')}"),
        ("batching settings", target.get("batching")),
        ("batching hash", target.get("batching_hash")),
        ("hardware", f"{hardware.get('cpu')} ×{hardware.get('cpu_count')}; gpu "
                     f"{hardware.get('gpu')}; driver {hardware.get('driver')}"),
        ("gates file", f"{manifest.get('gates_file')} (sha256 {manifest.get('gates_hash')})"),
        ("scale / preset", f"{manifest.get('scale')} / {manifest.get('preset')}"),
        ("started / ended", f"{manifest.get('started_at')} → {manifest.get('ended_at')}"),
        ("run ended", manifest.get("ended")
         + (f" — {manifest.get('reason')}" if manifest.get("reason") else "")
         if manifest.get("ended") else None),
    ]  # fmt: skip
    for name, entry in (manifest.get("profiles") or {}).items():
        entry = entry if isinstance(entry, dict) else {}
        pairs.append((f"profile {name} (hash {entry.get('params_hash')})", entry.get("params")))
    return f'<section id="provenance"><h2>Provenance</h2>{key_value_table(pairs)}</section>'


def render_report(
    run: RunData, evaluation: Evaluation | None, *, missing_verdicts: str | None = None
) -> str:
    """The whole page as a string (pure: reads and writes nothing)."""
    title = Path(run.path).name or run.path
    target = ((run.manifest or {}).get("target") or {}).get("url")
    if evaluation is not None and evaluation.rollback_target is None and target:
        # Rollback commands should name the server this run measured, not a placeholder.
        evaluation = dataclasses.replace(evaluation, rollback_target=str(target))
    generated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    toc = " · ".join(f'<a href="#profile-{_slug(n)}">{_e(n)}</a>' for n in run.profiles)
    body = [
        f"<h1>batchgate report — {_e(title)}</h1>",
        f"<p>run directory <code>{_e(run.path)}</code>; generated {generated}."
        f' Profiles: {toc} · <a href="#provenance">provenance</a></p>',
        _verdicts_section(evaluation, missing_verdicts),
    ]
    if run.notes:
        body.append(f"<h3>Run notes</h3>{notes_list(run.notes)}")
    body.extend(_profile_section(run, name) for name in run.profiles)
    body.append(capacity_section(run.manifest))
    body.append(_provenance_section(run))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>batchgate report — {_e(title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_report(
    run_dir: Path,
    evaluation: Evaluation | None = None,
    *,
    out: Path | None = None,
    run: RunData | None = None,
) -> Path:
    """(Re)write `run_dir/report.html` (or `out`) and return its path.

    Without an evaluation the run's verdicts.json is used; without either the gate section
    says so. `run` saves reading the directory again when the caller already has it. Raises
    ReportError when the run directory cannot be read or the file not written.
    """
    run_dir = Path(run_dir)
    if run is None:
        try:
            run = load_run(run_dir)
        except RunDirError as exc:
            raise ReportError(str(exc)) from None
    missing = None
    if evaluation is None:
        saved = run_dir / "verdicts.json"
        if saved.exists():
            try:
                evaluation = read_verdicts(saved)
            except (OSError, ValueError) as exc:
                missing = f"verdicts.json is unreadable ({exc}); run `batchgate check`"
        else:
            missing = "no verdicts.json in the run directory; run `batchgate check RUN_DIR`"
    page = render_report(run, evaluation, missing_verdicts=missing)
    path = Path(out) if out is not None else run_dir / REPORT_FILE
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)  # a browser never sees half a page
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()  # no half-written page left beside the target
        raise ReportError(f"cannot write {path}: {exc}") from None
    return path
