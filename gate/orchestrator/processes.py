"""Child processes of a run: the bundled server and the load generator, each in its own group.

Owns starting a command in a new process group (so a stop reaches its children too: Locust
workers, uvicorn), tying its life to this process on Linux (a parent-death signal: when
`batchgate` itself is SIGKILLed, nothing it started keeps running), stopping it (a polite
signal, a bounded wait, then SIGKILL to the whole group), reading a `--port-file`, and waiting
for `/health` by polling with a deadline. It never imports `reference_server` or `loadgen`
(docs/architecture.md): they are started as `python -m ...`.
It does not know what the processes are for; `gate.orchestrator.session` decides that.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from gate.errors import BatchgateError, ExitCode

__all__ = [
    "ChildProcess",
    "ProcessError",
    "ServerStartError",
    "live_children",
    "python_argv",
    "start_child",
    "wait_for_health",
    "wait_for_port_file",
]

# How often the waits below look again; short enough that a fast server is not kept waiting,
# long enough that polling costs nothing on a busy 2-core machine.
POLL_SECONDS = 0.1


class ProcessError(BatchgateError, RuntimeError):
    """A child process could not be started or stopped."""

    default_exit_code = ExitCode.NO_DATA


class ServerStartError(ProcessError):
    """The server did not come up; the message says why and where its log is."""


@dataclass(kw_only=True)
class ChildProcess:
    """A started child: its Popen, the command, and the log file its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    argv: tuple[str, ...]
    log_path: Path | None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.popen.poll()

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout_seconds: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            return None

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the child's whole process group (it leads its own group)."""
        # Already gone (or reaped): nothing left to signal.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signum)

    def stop(self, *, first_signal: int = signal.SIGTERM, timeout_seconds: float = 10.0) -> int:
        """Signal, wait up to `timeout_seconds`, then SIGKILL the group; returns the exit code.

        The group is killed even when the leader exited by itself, so no grandchild (a Locust
        worker, a uvicorn reloader) outlives the run.
        """
        if self.alive:
            self.signal_group(first_signal)
            if self.wait(timeout_seconds) is None:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(timeout=10.0)
        self.signal_group(signal.SIGKILL)  # stragglers of the group, if any
        self.close_log()
        return int(self.popen.returncode)

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, max_lines: int = 20) -> str:
        """The last lines of the child's log, for error messages."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _parent_death_hook(signum: int | None) -> Callable[[], None] | None:
    """A preexec_fn that asks Linux to send `signum` to the child when this thread exits.

    Only from the main thread: the kernel watches the thread that forked, and a helper thread
    ending would otherwise take the child with it. Elsewhere (not Linux, no libc) None: the
    polite stops of the run's `finally` path are then the only guard.
    """
    if signum is None or not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: nobody will signal
            os.kill(os.getpid(), signum)

    return hook


def start_child(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path | None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    parent_death_signal: int | None = signal.SIGTERM,
) -> ChildProcess:
    """Start `argv` in a new session (its own process group), output appended to `log_path`.

    `parent_death_signal` (Linux) reaches the child if this process dies without stopping it
    (SIGKILL, a crash); SIGINT lets the load generator still write its load.json.
    """
    log: IO[bytes] | None = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 - owned by the ChildProcess, closed in stop()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log if log is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            # A new session: Ctrl-C in the terminal reaches batchgate only, which then stops
            # the children in order (load first, then the server) instead of all at once.
            start_new_session=True,
            preexec_fn=_parent_death_hook(parent_death_signal),
        )
    except OSError as exc:
        if log is not None:
            log.close()
        raise ProcessError(f"cannot start {name} ({argv[0]}): {exc}") from exc
    return ChildProcess(name=name, popen=popen, argv=tuple(argv), log_path=log_path, _log=log)


def python_argv(module: str, args: Sequence[str]) -> list[str]:
    """`python -m module args...` with this interpreter (the same virtualenv)."""
    return [sys.executable, "-m", module, *args]


def wait_for_port_file(child: ChildProcess, path: Path, *, timeout_seconds: float) -> int:
    """Poll until the server writes its bound port to `path`; raises ServerStartError."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text(encoding="utf-8").strip()
            if text.isdigit():
                return int(text)
        code = child.poll()
        if code is not None:
            raise ServerStartError(
                f"{child.name} exited with code {code} before listening" + _tail_note(child)
            )
        time.sleep(POLL_SECONDS)
    raise ServerStartError(
        f"{child.name} wrote no port to {path} within {timeout_seconds:g} s" + _tail_note(child)
    )


def wait_for_health(url: str, *, timeout_seconds: float, child: ChildProcess | None = None) -> None:
    """Poll `url` + /health until it answers 200; raises ServerStartError at the deadline."""
    deadline = time.monotonic() + timeout_seconds
    last = "no answer yet"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                raise ServerStartError(
                    f"{child.name} exited with code {child.poll()} while starting"
                    + _tail_note(child)
                )
            try:
                response = client.get(url.rstrip("/") + "/health")
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(POLL_SECONDS)
    raise ServerStartError(
        f"{url}/health did not answer 200 within {timeout_seconds:g} s ({last})"
        + (_tail_note(child) if child is not None else "")
    )


def _tail_note(child: ChildProcess) -> str:
    tail = child.log_tail()
    where = f"; log: {child.log_path}" if child.log_path is not None else ""
    return f"{where}\n{tail}" if tail else where


def live_children(children: Sequence[ChildProcess]) -> list[ChildProcess]:
    return [c for c in children if c.alive]
