"""The benchmarks' harness: one server process started, waited for, stopped, and its log kept;
plus what every benchmark does at its end: a table printed, a JSON result written with the host
it was measured on.

`Server` runs the bundled server (`Server.bundled(*flags)`) or any command that takes
`--port 0 --port-file FILE` (the fake OpenAI server of tests/loadgen, another checkout's server
through `cwd`) or, where the command has a `{port}` in it, on a free port the harness picks (a
third-party server such as `transformers serve`); in its own process group on 127.0.0.1, ready
once its /health answers 200.
Used as a context manager it is stopped (SIGTERM, a bounded wait, then SIGKILL to the group) on
the way out, whatever happened inside; its output goes to a log file that `log_text()` reads
while it runs and after. One object per server, reused by every benchmark, in the manner of
vLLM's `benchmarks/sweep/server.py`. The process plumbing is gate.orchestrator.processes', the
one `batchgate run` uses.

Owns: the command line's port flags, the working folder, the normal-priority option, the
process-tree RSS, the table layout, the result file's folder and the host facts. Does not know
what is measured, which flags a benchmark passes, or how a benchmark reads /metrics; the host's
stolen CPU time is benchmarks.host_steal's.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from gate.orchestrator.processes import (
    ChildProcess,
    ServerStartError,
    wait_for_health,
    wait_for_port_file,
)

__all__ = [
    "REPO_ROOT",
    "RESULTS_DIR",
    "Server",
    "ServerStartError",
    "free_port",
    "host_facts",
    "normal_priority",
    "print_table",
    "write_result",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def normal_priority() -> None:
    """In a child before exec: undo the parent's niceness (root may lower it; others keep it).

    A benchmark that nices itself to stand for a client on another machine must not hand that
    niceness to the server or to the side it compares with.
    """
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)


class Server:
    """One server on 127.0.0.1, port 0, from `start()` (or `with`) to `stop()`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str = "server",
        workdir: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path = REPO_ROOT,
        at_normal_priority: bool = False,
        start_timeout_seconds: float = 300.0,
        stop_timeout_seconds: float = 60.0,
    ) -> None:
        """`argv` without port flags (they are appended), or with `{port}` where the command
        takes its port (a free one is filled in); `env` is laid over this process's
        environment; `workdir` holds the port file and server.log (a temporary folder, removed
        at stop, when None); `at_normal_priority` runs `normal_priority` in the child."""
        if not argv:
            raise ValueError("Server needs a command")
        if start_timeout_seconds <= 0 or stop_timeout_seconds <= 0:
            raise ValueError("Server timeouts must be positive")
        self.argv = tuple(argv)
        self.name = name
        self.env = dict(env or {})
        self.cwd = cwd
        self.at_normal_priority = at_normal_priority
        self.start_timeout_seconds = start_timeout_seconds
        self.stop_timeout_seconds = stop_timeout_seconds
        self._owns_workdir = workdir is None
        self._workdir = workdir
        self._child: ChildProcess | None = None
        self._port: int | None = None
        self._kept_log: str | None = None
        self.exit_code: int | None = None

    def _in_child(self) -> None:
        """Before exec: a process group of its own, so that a stop reaches the engine-core
        child too and Ctrl-C reaches the benchmark only (which then stops the server in order).
        Not a session of its own, unlike `batchgate run`'s children: Linux's autogroup
        scheduler shares CPU time out per session, and the benchmarks' figures (server beside
        offline engine, server beside load process) were all measured with the server in the
        benchmark's session; a session apart would move its CPU share on a busy machine."""
        os.setpgid(0, 0)
        if self.at_normal_priority:
            normal_priority()

    @classmethod
    def bundled(cls, *flags: str, **options: object) -> Server:
        """The bundled server (`python -m reference_server FLAGS`) with this interpreter."""
        return cls([sys.executable, "-m", "reference_server", *flags], **options)  # type: ignore[arg-type]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Server:
        """Start the command and wait for its port file, then for /health to answer 200.

        Raises ServerStartError (with the log's tail) when it exits or is not ready within
        `start_timeout_seconds`; the process is stopped first.
        """
        if self._child is not None:
            raise RuntimeError(f"{self.name} already started")
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="bench-server-"))
        self._workdir.mkdir(parents=True, exist_ok=True)
        port_file = self._workdir / "port"
        port_file.unlink(missing_ok=True)
        if any("{port}" in arg for arg in self.argv):
            self._port = free_port()
            argv = tuple(arg.replace("{port}", str(self._port)) for arg in self.argv)
        else:
            argv = (*self.argv, "--port", "0", "--port-file", str(port_file))
        log_path = self._workdir / "server.log"
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            popen = subprocess.Popen(
                argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                preexec_fn=self._in_child,
            )  # fmt: skip
        self._child = ChildProcess(name=self.name, popen=popen, argv=argv, log_path=log_path)
        began = time.monotonic()
        try:
            if self._port is None:
                self._port = wait_for_port_file(
                    self._child, port_file, timeout_seconds=self.start_timeout_seconds
                )
            left = max(1.0, self.start_timeout_seconds - (time.monotonic() - began))
            wait_for_health(self.url, timeout_seconds=left, child=self._child)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> int:
        """Stop it (SIGTERM, up to `stop_timeout_seconds`, then SIGKILL to its group), keep its
        log, remove a temporary working folder; returns the exit code. Safe to call twice."""
        if self._child is None:
            raise RuntimeError(f"{self.name} was never started")
        if self.exit_code is None:
            self.exit_code = self._child.stop(
                first_signal=signal.SIGTERM, timeout_seconds=self.stop_timeout_seconds
            )
            if self._owns_workdir and self._workdir is not None:
                self._kept_log = self.log_text()
                shutil.rmtree(self._workdir, ignore_errors=True)
        return self.exit_code

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._child is not None:
            self.stop()

    # -- what a benchmark reads --------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.name} is not listening yet")
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def workdir(self) -> Path | None:
        """The folder of its port file and server.log (None before a start made one)."""
        return self._workdir

    @property
    def pid(self) -> int:
        if self._child is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._child.pid

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.alive

    def log_text(self) -> str:
        """Everything the server wrote so far (kept after a stop that removed its folder)."""
        if self._kept_log is not None:
            return self._kept_log
        if self._child is None or self._child.log_path is None:
            return ""
        try:
            return self._child.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def rss_bytes(self) -> int:
        """Resident memory of the server's own process (its /proc VmRSS)."""
        return psutil.Process(self.pid).memory_info().rss

    def tree_rss_bytes(self) -> int:
        """Resident memory summed over the server and its children (the engine core's
        process among them); a child that exits while being read counts 0."""
        root = psutil.Process(self.pid)
        total = 0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total


def free_port() -> int:
    """A loopback port nothing listens on now. Another process may take it before the server
    binds it: the server then exits and its start fails naming its log, never a silent mix-up."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """`rows` under `header`: the first column left-aligned, the others right-aligned, each
    column as wide as its widest cell (cells are printed with str())."""
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(width)]
    for row in cells:
        first, *rest = row
        line = f"{first:<{widths[0]}}" + "".join(
            f"  {cell:>{w}}" for cell, w in zip(rest, widths[1:], strict=True)
        )
        print(line.rstrip())


def host_facts() -> dict[str, Any]:
    """The machine a result was measured on: its platform, CPU count and load average now (a
    figure from a busy machine reads differently)."""
    return {"platform": platform.platform(), "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg()}  # fmt: skip


def write_result(path: str | Path, result: Mapping[str, Any]) -> Path:
    """`result` as indented JSON at `path`, its folder made first; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return path
