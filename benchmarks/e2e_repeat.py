"""Proof: the end-to-end tests give the same answer however often they run and however busy
the machine is (issue 10: "run the e2e files 10 times in a row on an idle machine and 10 times
with a busy core, with zero failures").

Runs `python -m pytest tests/e2e` --runs times back to back in --repo (default: this checkout;
give a clean clone so that edits made meanwhile cannot change what is tested), each pass under
the condition asked for:
  idle  the machine as it is;
  busy  one core taken by `python3 -c 'while True: pass'` for the whole pass (killed by its PID
        after it, whatever the pass did).
The tests run with the clone's own interpreter (`<repo>/.venv/bin/python`, which
`./scripts/bootstrap` makes there and whose editable install points at the clone) when it has one:
another checkout's interpreter would import that checkout's packages in every subprocess a test
starts (`python -m gate.cli`), testing other code than the clone's. Prints one row per pass (exit
code, counts, seconds, load average, the failed tests' ids) and the run of consecutive clean
passes, and writes benchmarks/results/e2e_repeat.json (appending to the passes already there for
the same commit, so a proof may be gathered in several calls).
A pass that fails does not stop the loop: every failure is data, and the table says where the
clean run broke. With BATCHGATE_REQUIRE_LLAMACPP=1 in the environment (as .ci/run sets it after
building llama-server) a missing llama.cpp server fails its test instead of skipping it.

    .venv/bin/python -m benchmarks.e2e_repeat --condition idle --runs 10 [--repo /tmp/clone]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import REPO_ROOT as HERE
from benchmarks.harness import RESULTS_DIR, write_result

RESULTS = RESULTS_DIR / "e2e_repeat.json"
# pytest's closing line: "31 passed, 1 failed, 2 skipped in 651.25s (0:10:51)".
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)\b")
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def parse_pytest_output(text: str) -> dict[str, Any]:
    """Counts from pytest's last summary line and the ids of failed or erroring tests (-rf)."""
    summary = next(
        (line for line in reversed(text.splitlines()) if " in " in line and _COUNT.search(line)),
        "",
    )
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for number, kind in _COUNT.findall(summary):
        key = "errors" if kind.startswith("error") else kind
        if key in counts:
            counts[key] += int(number)
    return {**counts, "summary": summary.strip("= "), "failed_ids": _FAILED.findall(text)}


def clean(entry: dict[str, Any]) -> bool:
    """Exit 0, nothing failed or erred, and something ran (a killed pytest prints no counts)."""
    return entry["rc"] == 0 and entry["failed"] == entry["errors"] == 0 and entry["passed"] > 0


def longest_clean_streak(entries: list[dict[str, Any]]) -> int:
    best = current = 0
    for entry in entries:
        current = current + 1 if clean(entry) else 0
        best = max(best, current)
    return best


def python_of(repo: Path) -> Path:
    """The interpreter the passes run with: the clone's own venv, else this one."""
    own = repo / ".venv" / "bin" / "python"
    return own if own.exists() else Path(sys.executable)


def one_pass(repo: Path, condition: str, log: Path) -> dict[str, Any]:
    busy = None
    python = python_of(repo)
    if condition == "busy":
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    started = time.monotonic()
    try:
        with log.open("w", encoding="utf-8") as out:
            rc = subprocess.run(
                [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e",
                 "-rfE", "--durations=15"],
                cwd=repo, stdout=out, stderr=subprocess.STDOUT, check=False,
            ).returncode  # fmt: skip
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    seconds = time.monotonic() - started
    parsed = parse_pytest_output(log.read_text(encoding="utf-8", errors="replace"))
    return {
        "condition": condition,
        "rc": rc,
        "seconds": round(seconds, 1),
        "loadavg": os.getloadavg(),
        "log": str(log),
        "python": str(python),
        **parsed,
    }


def commit_of(repo: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True
    )
    head = done.stdout.strip() if done.returncode == 0 else "uncommitted"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=repo, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return head + ("+dirty" if dirty else "")


def print_table(commit: str, entries: list[dict[str, Any]]) -> None:
    print(f"e2e passes of {commit}")
    print(
        f"{'#':>3} {'condition':9} {'rc':>3} {'passed':>6} {'failed':>6} {'seconds':>8}  "
        "load 1/5/15     failed tests"
    )
    for i, e in enumerate(entries, 1):
        load = " ".join(f"{x:.2f}" for x in e["loadavg"])
        failed = ", ".join(e["failed_ids"]) or "-"
        print(
            f"{i:>3} {e['condition']:9} {e['rc']:>3} {e['passed']:>6} "
            f"{e['failed'] + e['errors']:>6} {e['seconds']:>8.1f}  {load:14} {failed}"
        )
    for condition in sorted({e["condition"] for e in entries}):
        mine = [e for e in entries if e["condition"] == condition]
        print(
            f"{condition}: {sum(map(clean, mine))} of {len(mine)} passes clean, "
            f"longest clean run {longest_clean_streak(mine)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--condition", choices=("idle", "busy"), required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repo", type=Path, default=HERE, help="checkout to test (a clone)")
    parser.add_argument("--logs", type=Path, help="where each pass's log goes (default: temp)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON written")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    repo = args.repo.resolve()
    if not (repo / "tests" / "e2e").is_dir():
        parser.error(f"--repo {repo}: no tests/e2e there")
    logs = args.logs or Path(os.environ.get("TMPDIR", "/tmp")) / "batchgate-e2e-repeat"
    logs.mkdir(parents=True, exist_ok=True)
    commit = commit_of(repo)
    saved: dict[str, Any] = {}
    if args.results.is_file():
        try:
            saved = json.loads(args.results.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            parser.error(f"--results {args.results}: not the JSON this script writes ({exc})")
        if not isinstance(saved, dict):
            parser.error(f"--results {args.results}: not the JSON this script writes")
    entries: list[dict[str, Any]] = saved.get(commit, [])
    for _ in range(args.runs):
        n = len(entries) + 1
        log = logs / f"{commit}-{n:02d}-{args.condition}.log"
        e = one_pass(repo, args.condition, log)
        entries.append(e)
        print(f"pass {n} ({args.condition}): rc {e['rc']}, {e['summary']}", flush=True)
        saved[commit] = entries
        write_result(args.results, saved)
    print_table(commit, entries)
    return 0 if all(clean(e) for e in entries[-args.runs :]) else 1


if __name__ == "__main__":
    sys.exit(main())
