"""benchmarks/e2e_repeat.py: pytest's closing line read right, clean runs counted as runs in a
row, and a loop over a tiny tests/e2e tree that records a failing pass instead of stopping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import e2e_repeat

REPO = Path(__file__).resolve().parents[2]


def _repeat(repo: Path, tmp_path: Path, results: Path, *, runs: int):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.e2e_repeat", "--condition", "idle",
         "--runs", str(runs), "--repo", str(repo), "--logs", str(tmp_path / "logs"),
         "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_parse_reads_counts_and_failed_ids() -> None:
    text = (
        "....F.s\n"
        "FAILED tests/e2e/test_a.py::test_x[static] - AssertionError: 3 != 1\n"
        "ERROR tests/e2e/test_b.py::test_y - RuntimeError\n"
        "=== 29 passed, 1 failed, 2 skipped, 1 error in 651.25s (0:10:51) ===\n"
    )
    parsed = e2e_repeat.parse_pytest_output(text)
    assert (parsed["passed"], parsed["failed"], parsed["skipped"], parsed["errors"]) == (
        29,
        1,
        2,
        1,
    )
    assert parsed["failed_ids"] == [
        "tests/e2e/test_a.py::test_x[static]",
        "tests/e2e/test_b.py::test_y",
    ]
    assert parsed["summary"].startswith("29 passed")


def test_a_pass_with_no_summary_line_is_not_clean() -> None:
    parsed = e2e_repeat.parse_pytest_output("Killed\n")
    assert parsed["passed"] == 0
    assert not e2e_repeat.clean({"rc": 0, **parsed})


def test_longest_clean_streak_breaks_at_a_failure() -> None:
    ok = {"rc": 0, "passed": 31, "failed": 0, "errors": 0}
    bad = {"rc": 1, "passed": 30, "failed": 1, "errors": 0}
    assert e2e_repeat.longest_clean_streak([ok, ok, bad, ok, ok, ok]) == 3
    assert e2e_repeat.longest_clean_streak([bad]) == 0
    assert e2e_repeat.longest_clean_streak([]) == 0


def test_loop_records_every_pass_and_exits_1_when_one_failed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "tests" / "e2e").mkdir(parents=True)
    # Fails on its first run only: the loop must go on and record both passes.
    marker = tmp_path / "ran-once"
    (repo / "tests" / "e2e" / "test_flaky.py").write_text(
        "from pathlib import Path\n"
        f"MARK = Path({str(marker)!r})\n"
        "def test_ok():\n    assert True\n"
        "def test_first_time_fails():\n"
        "    first = not MARK.exists()\n    MARK.touch()\n    assert not first\n",
        encoding="utf-8",
    )
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    results = tmp_path / "out.json"
    done = _repeat(repo, tmp_path, results, runs=2)
    assert done.returncode == 1, done.stdout + done.stderr
    (entries,) = json.loads(results.read_text(encoding="utf-8")).values()
    assert [e["failed"] for e in entries] == [1, 0]
    assert entries[0]["failed_ids"] == ["tests/e2e/test_flaky.py::test_first_time_fails"]
    assert "idle: 1 of 2 passes clean, longest clean run 1" in done.stdout


def _tiny_repo(tmp_path: Path, test_text: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests" / "e2e").mkdir(parents=True)
    (repo / "tests" / "e2e" / "test_one.py").write_text(test_text, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def test_passes_run_with_the_clones_own_interpreter(tmp_path: Path) -> None:
    # Another checkout's interpreter would import that checkout's editable install in every
    # subprocess a test starts: the clone's venv is what makes the clone's code the tested code.
    repo = _tiny_repo(
        tmp_path, "import sys\ndef test_which():\n    print('RAN-WITH', sys.executable)\n"
    )
    own = repo / ".venv" / "bin" / "python"
    own.parent.mkdir(parents=True)
    own.symlink_to(sys.executable)
    results = tmp_path / "out.json"
    done = _repeat(repo, tmp_path, results, runs=1)
    assert done.returncode == 0, done.stdout + done.stderr
    (entries,) = json.loads(results.read_text(encoding="utf-8")).values()
    assert entries[0]["python"] == str(own)
    assert e2e_repeat.python_of(tmp_path) == Path(sys.executable)  # no venv there


def test_a_corrupt_results_file_is_a_clear_error(tmp_path: Path) -> None:
    repo = _tiny_repo(tmp_path, "def test_ok():\n    pass\n")
    results = tmp_path / "out.json"
    for text in ("{not json", "[1, 2]"):
        results.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.e2e_repeat", "--condition", "idle",
             "--runs", "1", "--repo", str(repo), "--results", str(results)],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"--results {results}: not the JSON this script writes" in done.stderr
        assert "Traceback" not in done.stderr
        assert results.read_text(encoding="utf-8") == text  # left as it was
