"""`batchgate tune`: choose batching settings for a workload by measuring them (docs/tune.md).

Owns the command around the session (`gate.tune.session`: target, calibration, search): its
arguments and their validation before anything starts, printing the candidates table and the
winner, and the exit code. The artifacts are written by `gate.outputs.tune_json` (tune.json) and
`gate.outputs.tune_report` (tune.html), the winning preset by `gate.tune.preset` (in the tune
directory, and in the gates file --write-gates names; never in ./gates.yaml unless asked).
Exit: 0 a winner (preset written), 1 no candidate passes every gate, 2 usage, 4 invalid gates
file, 5 the target died, could not be calibrated, or the search was interrupted.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from gate.commands import _options as options
from gate.commands._common import (
    add_common_arguments,
    add_set_and_out_arguments,
    load_gates_and_preset,
    new_directory_in,
    output_console,
)
from gate.errors import BatchgateError, ExitCode, UsageError
from gate.gates.preset_writer import check_preset_target
from gate.orchestrator.live import LiveView
from gate.orchestrator.plan import PlanError, parse_sets, resolve_plans
from gate.orchestrator.runner import new_run_id
from gate.outputs.tune_json import TUNE_FILE, write_tune_json
from gate.outputs.tune_report import candidates_table, preset_instructions, write_html
from gate.tune.candidate import Candidate
from gate.tune.objective import Objective, parse_objective, with_monitors
from gate.tune.preset import preset_target, write_winner
from gate.tune.session import TuneOutcome, TuneRequest, TuneSession
from gate.tune.space import parse_knobs, parse_setting
from gate.units import UnitError, UnitKind, parse_quantity

__all__ = ["register", "run"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "tune",
        help="choose batching settings for a workload by measuring them",
        description="Search batching settings for the ones that maximise a profile's objective "
        "while every gate passes with confidence; the winner becomes a named preset.",
    )
    add_common_arguments(parser)
    options.add(parser, "profile", required=True, detail="the workload to tune for")
    parser.add_argument(
        "--knobs",
        help="comma-separated knobs to vary (default policy,max_wait_ms,max_num_seqs,"
        "max_num_batched_tokens); also slo_target_ms, max_prefill_chunk_tokens, "
        "interactive.KEY / batch.KEY, num_gpu_blocks_override, ...",
    )
    parser.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="KNOB=V1,V2,...",
        help="the values to try for a knob instead of its default grid (repeat)",
    )
    parser.add_argument(
        "--objective",
        help="METRIC[:STATISTIC] to maximise (rates) or minimise (latencies) on the profile: "
        "default goodput:rate when the gates file has slos:, else output_tokens:rate; e.g. "
        "ttft:p50, e2e:p90",
    )
    parser.add_argument(
        "--budget", default="10m", help="wall time for the search, e.g. 600s, 10m, 1h (default 10m)"
    )
    options.add(
        parser,
        "scale",
        detail="here the first measurement of each candidate's; promising ones are measured "
        "again at the next scales",
    )
    parser.add_argument(
        "--server-cmd",
        metavar="TEMPLATE",
        help="restart the target for every candidate with this command; {knob} fields take the "
        "candidate's values, {port} a free port (the target is then http://127.0.0.1:{port} "
        "unless --target says otherwise); the first --values of each knob is the incumbent",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="with --server-cmd: the settings the calibration server is started with, the "
        "reference relative gates judge every candidate against (default: the incumbent; "
        "give the settings you trust, e.g. policy=continuous). The bundled server and a "
        "--target with /admin/batching are calibrated on the gates file's safe preset",
    )
    parser.add_argument(
        "--preset-name", default="tuned", help="name of the winning preset (default tuned)"
    )
    parser.add_argument(
        "--write-gates",
        type=Path,
        metavar="FILE",
        help="also add the winning preset to this gates file (made from the --gates file when "
        "it does not exist); without it the preset is only written into the tune directory "
        "(preset.yaml, and gates.yaml: the --gates file with it)",
    )
    add_set_and_out_arguments(parser)
    parser.set_defaults(func=run)


def _budget_seconds(text: str) -> float:
    # "10m" as the issue and most CLIs write it; the gates file's units keep m for nothing.
    text = re.sub(r"(?<=\d)\s*m$", "min", text.strip())
    try:
        seconds = parse_quantity(text, kind=UnitKind.DURATION)
    except UnitError as exc:
        raise UsageError(f"--budget: {exc}") from None
    if seconds <= 0:
        raise UsageError("--budget must be > 0")
    return seconds


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        budget = _budget_seconds(args.budget)
        if not _NAME.match(args.preset_name):
            raise UsageError(f"--preset-name {args.preset_name!r}: lower case, digits and _")
        if args.server_cmd is not None and args.preset is not None:
            raise UsageError("--preset starts the bundled server; with --server-cmd it has no use")
        if args.calibration == "off":
            raise UsageError(
                "--calibration off: tune judges every candidate against one calibration of the "
                "reference settings; use fresh, auto or a calibration.json"
            )
        gates_file, preset = load_gates_and_preset(args)
        args.set = options.profile_sets(args.set, [args.profile], known=gates_file.profiles)
        # Where the winner will go, checked now rather than after the whole search.
        check_preset_target(preset_target(args.gates, args.write_gates), args.preset_name)
        parsed = parse_knobs(args.knobs, args.values)
        reference = dict(parse_setting(item, "--reference") for item in args.reference)
        if reference and args.server_cmd is None:
            raise UsageError(
                "--reference is for --server-cmd; the bundled server and a --target with "
                "/admin/batching are calibrated on the gates file's safe preset"
            )
        unknown = set(reference) - {path for path, _ in parsed}
        if unknown:
            raise UsageError(f"--reference sets {', '.join(sorted(unknown))}, not a tuned knob")
        objective = parse_objective(args.objective, gates_file)
        gates_text, gates_file = with_monitors(
            args.gates.read_text(encoding="utf-8"), args.profile, objective, path=str(args.gates)
        )
        overrides = parse_sets(args.set)
        # Fail early on a bad profile or override, before any server starts.
        plans = resolve_plans(
            [args.profile], gates_file, scale=args.scale, extra_overrides=overrides
        )
        tune_dir = new_directory_in(args.out, None, f"tune-{new_run_id()}")
    except UsageError as exc:
        err.print(f"batchgate tune: {exc}", markup=False)
        return int(exc.code)
    except PlanError as exc:
        err.print(f"batchgate tune: {exc}", markup=False)
        return int(ExitCode.USAGE)
    except BatchgateError as exc:  # the preset cannot be written where it would go
        err.print(f"batchgate tune: {exc}", markup=False)
        return int(exc.exit_code)
    request = TuneRequest(
        profile=args.profile,
        scale=args.scale,
        gates_file=gates_file,
        gates_text=gates_text,
        plans=tuple(plans),
        knobs=parsed,
        objective=objective,
        overrides=overrides,
        budget_seconds=budget,
        preset_name=args.preset,
        preset=preset,
        reference=reference,
        target_url=args.target,
        server_cmd=args.server_cmd,
        server_args=tuple(args.server_arg),
        api_key=args.api_key,
        admin_token=args.admin_token,
        workers=args.workers,
        calibration=args.calibration,
    )
    tune_dir.mkdir(parents=True, exist_ok=True)
    session = TuneSession(request, tune_dir, LiveView())
    try:
        outcome = session.run()
    except BatchgateError as exc:
        err.print(f"batchgate tune: {exc}", markup=False)
        return int(exc.exit_code)
    finally:
        session.stop()
    # On the bundled server the candidates ran on top of --preset: the winner includes it.
    bundled = args.target is None and args.server_cmd is None
    start_preset = dict(preset or {}) if bundled and args.preset is not None else None
    return _finish(args, tune_dir, outcome, objective, start_preset)


def _finish(
    args: argparse.Namespace,
    tune_dir: Path,
    outcome: TuneOutcome,
    objective: Objective,
    start_preset: dict[str, Any] | None,
) -> int:
    """tune.json, tune.html, the preset, the table; the exit code."""
    a = args
    search, winner, space = outcome.search, outcome.winner, outcome.space
    candidates = list(search.candidates.values())
    incumbent = search.candidates.get(Candidate(settings=search.incumbent, origin="").key)
    written, preset_error = None, None
    if winner is not None and search.ended == "completed":
        try:
            written = write_winner(
                name=a.preset_name,
                profile=a.profile,
                settings=winner.settings,
                start_preset=start_preset,
                tune_dir=tune_dir,
                gates=Path(a.gates),
                write_gates=a.write_gates,
            )
        except (BatchgateError, OSError) as exc:  # the results are kept whatever happens here
            preset_error = str(exc)
    write_tune_json(
        tune_dir / TUNE_FILE,
        profile=a.profile,
        objective={
            "metric": objective.metric,
            "statistic": objective.statistic,
            "higher_is_better": objective.higher_is_better,
        },
        budget_seconds=search.budget,
        rungs=search.rungs,
        knobs={k.path: list(k.values) for k in space.knobs},
        incumbent=search.incumbent,
        winner=None if winner is None else winner.settings,
        preset_name=a.preset_name,
        preset_files=written,
        preset_error=preset_error,
        runs_skipped_for_budget=search.skipped,
        ended=search.ended,
        calibration=outcome.calibration,
        candidates=[c.to_dict() for c in candidates],
    )
    summary = [
        ("profile", a.profile),
        ("objective", f"{objective.label} ({'max' if objective.higher_is_better else 'min'})"),
        ("incumbent", ", ".join(f"{k}={v}" for k, v in search.incumbent.items())),
        ("winner", "none" if winner is None else winner.label),
        ("ended", search.ended),
        ("runs left out for the budget", str(search.skipped)),
    ]
    write_html(
        tune_dir / "tune.html",
        title=f"batchgate tune — {a.profile}",
        summary=summary,
        candidates=candidates,
        winner=winner,
        objective=objective.label,
    )
    out = output_console()
    out.print(candidates_table(candidates, objective.label, f"batchgate tune — {a.profile}"))
    out.print(
        f"tune: {tune_dir / TUNE_FILE}  report: {tune_dir / 'tune.html'}",
        markup=False,
    )
    if search.ended != "completed":
        out.print(f"search {search.ended}: results so far kept; no preset written", markup=False)
        return int(ExitCode.NO_DATA)
    if winner is None:
        out.print("no candidate passed every gate; no preset written", markup=False)
        return int(ExitCode.FAILED)
    best = winner.latest
    # Compared at the same scale where the incumbent has one (a smoke p50 and a full p50 are
    # not the same measurement), else at its largest, and said so.
    base = None
    if incumbent is not None and best is not None:
        base = incumbent.at(best.rung) or incumbent.latest
    if base is not None and best is not None and winner is not incumbent:
        out.print(
            f"winner: {winner.label}: {objective.label} {_maybe(best.objective)} vs the "
            f"incumbent's {_maybe(base.objective)} ({base.outcome}"
            + ("" if base.rung == best.rung else f", at {base.scale}")
            + ")"
            + _significance(best, base, objective),
            markup=False,
        )
    elif winner is incumbent:
        out.print("winner: the incumbent settings (no candidate did better)", markup=False)
    if preset_error is not None:
        out.print(f"the winning preset was not written: {preset_error}", markup=False)
        return int(ExitCode.USAGE)
    assert written is not None
    for line in preset_instructions(a.preset_name, *written):
        out.print(line, markup=False, soft_wrap=True)
    return int(ExitCode.PASSED)


def _maybe(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _significance(best: Any, base: Any, objective: Any) -> str:
    lo, hi = best.objective_interval or (None, None)
    blo, bhi = base.objective_interval or (None, None)
    if None in (lo, hi, blo, bhi):
        return "; no interval to compare them by"
    if objective.higher_is_better and lo is not None and bhi is not None and lo > bhi:
        return "; the intervals do not overlap"
    if not objective.higher_is_better and hi is not None and blo is not None and hi < blo:
        return "; the intervals do not overlap"
    return "; the intervals overlap (a difference within the noise)"
