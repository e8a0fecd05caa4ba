"""`batchgate baseline save RUN_DIR --name N | list | show N [--baseline-dir DIR]`: manage stored
baselines."""

from __future__ import annotations

import argparse
import json
import sys

from gate.baseline import BaselineError, BaselineStore, InvalidBaselineRun
from gate.commands import _options as options
from gate.commands._common import default_gates_path, load_gates, open_run, output_console
from gate.errors import ExitCode, UsageError
from gate.gates.file import load
from gate.gates.reader import GatesFileError
from gate.gates.spec import GatesFile
from gate.rundir.run import RunDirError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "baseline",
        help="save, list or show baselines for regression gates",
        description="Baselines hold a run's statistics and provenance (default store "
        ".batchgate/baselines under the current directory); --baseline-dir goes before or "
        "after the action.",
    )
    options.add(parser, "baseline_dir")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    epilog = options.EXIT_CODES["baseline"]
    save = actions.add_parser("save", help="save a run as a baseline", epilog=epilog)
    options.add(save, "run_dir", detail="the run to save")
    save.add_argument(
        "--name",
        required=True,
        metavar="NAME",
        help="the baseline's name, as `--baseline NAME` of run, check and report takes it",
    )
    options.add(
        save,
        "gates",
        detail=f"also store every statistic it uses ({options.LOCAL_GATES_DEFAULT})",
    )
    save.add_argument("--force", action="store_true", help="replace an existing baseline")
    listing = actions.add_parser("list", help="list baselines", epilog=epilog)
    show = actions.add_parser("show", help="show one baseline", epilog=epilog)
    show.add_argument("name", metavar="NAME", help="the baseline to show")
    for action in (save, listing, show):
        options.add(action, "baseline_dir", repeated=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = output_console()
    store = BaselineStore(args.baseline_dir)
    try:
        if args.action == "save":
            # As `check` reads them: a gates file that is missing 2, invalid 4; a run path that
            # is missing 2, a directory that is no readable run (a damaged file) 5.
            gates_file = load_gates(args.gates) if args.gates else _default_gates()
            run_data = open_run(args.run_dir)
            baseline = store.save(run_data, args.name, gates_file=gates_file, overwrite=args.force)
            out.print(
                f"saved baseline {baseline.name!r}: {len(baseline.measures)} statistics, "
                f"profiles {', '.join(baseline.provenance) or 'none'} -> {store.root}",
                markup=False,
            )
            return int(ExitCode.PASSED)
        if args.action == "list":
            names = store.list()
            out.print("\n".join(names) if names else f"no baselines in {store.root}", markup=False)
            return int(ExitCode.PASSED)
        if args.action == "show":
            out.print(json.dumps(store.show(args.name), indent=2, sort_keys=True), markup=False)
            return int(ExitCode.PASSED)
    except UsageError as stop:
        print(f"batchgate baseline: {stop}", file=sys.stderr)
        return int(stop.code)
    except GatesFileError as exc:
        print(f"batchgate baseline: {exc}", file=sys.stderr)
        return int(ExitCode.INVALID_GATES)
    except InvalidBaselineRun as exc:  # the run itself: no data (exit 5), not a usage error
        print(f"batchgate baseline: {exc}", file=sys.stderr)
        return int(ExitCode.NO_DATA)
    except (BaselineError, RunDirError) as exc:
        print(f"batchgate baseline: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    print("batchgate baseline: choose save, list or show", file=sys.stderr)
    return int(ExitCode.USAGE)


def _default_gates() -> GatesFile | None:
    return load(default_gates_path())
