"""The bundled reference server as a child process of a run.

Owns the command line it is started with (`python -m reference_server --port 0 --port-file F`,
the preset's flags, then the user's `--server-arg`s, which win), its environment, waiting until
it listens and answers `/health`, and stopping it (SIGTERM: the server drains, then exits; SIGKILL
to its process group after a bounded wait). It does not know about profiles or gates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gate.orchestrator.processes import (
    ChildProcess,
    python_argv,
    start_child,
    wait_for_health,
    wait_for_port_file,
)

__all__ = ["BundledServer", "ServerOptions", "start_bundled_server"]


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    preset_flags: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    start_timeout_seconds: float = 180.0
    stop_timeout_seconds: float = 15.0
    # In-flight requests get this long after SIGTERM; a run only stops the server once it is
    # idle (or dead), so a long drain would only delay a fault's exit.
    drain_timeout_seconds: float = 5.0
    # Intra-op threads of the server's torch on a CPU-only host. torch's default (one thread
    # per core) spin-waits and fights the load generator and the observers for the same cores:
    # measured on the 2-core dev machine, a 512-token prefill took 1.7 s with the default and
    # 0.1 s with one thread. None keeps the caller's environment as it is.
    cpu_threads: int | None = 1

    def __post_init__(self) -> None:
        if self.start_timeout_seconds <= 0 or self.stop_timeout_seconds <= 0:
            raise ValueError("server start/stop timeouts must be > 0")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads must be >= 1, got {self.cpu_threads}")


@dataclass(kw_only=True)
class BundledServer:
    child: ChildProcess
    url: str

    @property
    def pid(self) -> int:
        return self.child.pid

    def stop(self, timeout_seconds: float) -> int:
        return self.child.stop(timeout_seconds=timeout_seconds)


def server_argv(port_file: Path, options: ServerOptions) -> list[str]:
    args: list[str] = [
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--log-level",
        "warning",
        "--drain-timeout-seconds",
        f"{options.drain_timeout_seconds:g}",
        *options.preset_flags,
        *options.extra_args,  # last: argparse keeps the last value, so the user's flags win
    ]
    return python_argv("reference_server", args)


def _environment(options: ServerOptions) -> dict[str, str]:
    env = dict(os.environ)
    if options.cpu_threads is not None and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(options.cpu_threads)
    return env


def start_bundled_server(run_dir: Path, options: ServerOptions) -> BundledServer:
    """Start the server, wait for its port file and /health; raises ServerStartError."""
    port_file = run_dir / ".server.port"
    port_file.unlink(missing_ok=True)
    child = start_child(
        "reference server",
        server_argv(port_file, options),
        log_path=run_dir / "server.log",
        env=_environment(options),
    )
    try:
        port = wait_for_port_file(child, port_file, timeout_seconds=options.start_timeout_seconds)
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, timeout_seconds=options.start_timeout_seconds, child=child)
    except BaseException:
        child.stop(timeout_seconds=options.stop_timeout_seconds)
        raise
    finally:
        port_file.unlink(missing_ok=True)
    return BundledServer(child=child, url=url)
