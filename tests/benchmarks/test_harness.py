"""benchmarks.harness: a given command is started on port 0, ready once /health answers, stopped
with its exit code and its log kept after its temporary folder is gone; a command that exits or
never listens is a ServerStartError naming the log, with nothing left running; the table lines
its columns up. And every benchmark module imports as `benchmarks.<name>` (no sys.path edits)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from benchmarks.harness import REPO_ROOT, Server, ServerStartError, print_table

FAKE = REPO_ROOT / "tests" / "loadgen" / "fake_openai_server.py"


def test_a_given_command_is_served_then_stopped_with_its_log_kept() -> None:
    server = Server([sys.executable, str(FAKE)], name="fake", start_timeout_seconds=60)
    with server:
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        assert server.alive
        assert server.tree_rss_bytes() >= server.rss_bytes() > 0
        # Its own process group (a stop reaches its children), the benchmark's session (the
        # scheduler's autogroup shares CPU out per session, as when the figures were taken).
        assert os.getpgid(server.pid) == server.pid != os.getpgid(0)
        assert os.getsid(server.pid) == os.getsid(0)
        workdir = server.workdir
        assert workdir is not None
        assert (workdir / "server.log").exists()
        pid = server.pid
    assert server.exit_code is not None
    assert not server.alive
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not workdir.exists()  # its temporary folder is removed ...
    assert "fake-openai listening on http://127.0.0.1:" in server.log_text()  # ... its log kept
    assert server.stop() == server.exit_code  # a second stop changes nothing


def test_a_command_that_takes_its_port_gets_a_free_one() -> None:
    command = [sys.executable, str(FAKE), "--port", "{port}"]
    with Server(command, start_timeout_seconds=60) as server:
        assert f"listening on http://127.0.0.1:{server.port}" in server.log_text()
        assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 200
        assert not (server.workdir / "port").exists()  # type: ignore[operator]


def test_a_given_workdir_is_kept_with_the_log_in_it(tmp_path: Path) -> None:
    with Server([sys.executable, str(FAKE)], workdir=tmp_path, start_timeout_seconds=60):
        pass
    assert "listening" in (tmp_path / "server.log").read_text()


def test_a_command_that_exits_is_an_error_naming_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"]
    server = Server(command, name="broken", workdir=tmp_path, start_timeout_seconds=60)
    with pytest.raises(ServerStartError, match=r"broken exited with code 3") as raised:
        server.start()
    assert "no model here" in str(raised.value)
    assert str(tmp_path / "server.log") in str(raised.value)
    assert server.exit_code == 3


def test_a_command_that_never_listens_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    server = Server(command, name="silent", workdir=tmp_path, start_timeout_seconds=0.5)
    with pytest.raises(ServerStartError, match=r"silent wrote no port .* within 0.5 s"):
        server.start()
    assert not server.alive
    assert server.exit_code is not None  # stopped, not left behind


def test_bad_settings_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="needs a command"):
        Server([])
    with pytest.raises(ValueError, match="must be positive"):
        Server(["true"], start_timeout_seconds=0)
    with pytest.raises(RuntimeError, match="never started"):
        Server(["true"]).stop()


def test_the_table_aligns_each_column_to_its_widest_cell(capsys: pytest.CaptureFixture) -> None:
    print_table(("measure", "a", "b"), [("tokens/s", "12.5", "7"), ("ratio", "0.9", "100.25")])
    assert capsys.readouterr().out.splitlines() == [
        "measure      a       b",
        "tokens/s  12.5       7",
        "ratio      0.9  100.25",
    ]


def test_every_benchmark_imports_as_a_package_module() -> None:
    names = sorted(
        f"benchmarks.{p.stem}" for p in (REPO_ROOT / "benchmarks").glob("*.py")
        if p.stem != "__init__"
    )  # fmt: skip
    # In a child, so that the modules' imports (torch among them) stay out of this process.
    code = "import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module(n)"
    done = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _touches_sys_path(path: Path) -> bool:
    """`sys.path` anywhere in the file's code (not in its comments or strings)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr == "path"
        and isinstance(node.value, ast.Name) and node.value.id == "sys"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    )  # fmt: skip


def test_no_other_benchmark_or_its_test_touches_sys_path(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import sys\n# sys.path.insert(0, 'x')\ntext = 'sys.path[:0]'\n")
    assert not _touches_sys_path(sample)
    sample.write_text("import sys\nif True:\n    sys.path[:0] = ['x']\n")
    assert _touches_sys_path(sample)
    files = [*REPO_ROOT.glob("benchmarks/*.py"), *REPO_ROOT.glob("tests/benchmarks/*.py")]
    touching = {str(p.relative_to(REPO_ROOT)) for p in files if _touches_sys_path(p)}
    assert not touching, (
        f"{sorted(touching)}: import the benchmarks' helpers as benchmarks.X and "
        "run them as `python -m benchmarks.NAME` from the repository root (benchmarks/__init__.py)"
    )
