"""The promise that a live `--target` gets its batching settings back even if batchgate is
killed outright (SIGKILL, OOM killer, a lost CI runner) while a preset is applied.

Owns a small watcher process, `python -m gate.orchestrator.restore_guard`, started right after a
preset is applied to a running target: it holds the settings the preset replaced in
`<run>/restore.json` and polls the batchgate process that started it. If batchgate dies while
`restore.json` still exists, the watcher PUTs the settings back (`live_preset.restore_settings`),
writes what happened into `restore.json` (`restored_by: guard`) and exits. On every other path
batchgate restores the settings itself, removes `restore.json`, and stops the watcher
(`RestoreGuard.release`). The admin token travels in the environment, never on the command
line. It does not decide whether to restore (`--keep-preset`, `gate.orchestrator.runner`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gate.orchestrator.processes import ChildProcess, python_argv, start_child

__all__ = ["RestoreGuard", "main"]

RESTORE_FILE = "restore.json"
_POLL_SECONDS = 0.25
_TOKEN_ENV = "BATCHGATE_ADMIN_TOKEN"


class RestoreGuard:
    """batchgate's side: start the watcher, and release it once the settings are back."""

    def __init__(self, child: ChildProcess, path: Path) -> None:
        self.child = child
        self.path = path

    @classmethod
    def start(
        cls, run_dir: Path, url: str, settings: dict[str, Any], *, admin_token: str | None
    ) -> RestoreGuard:
        path = run_dir / RESTORE_FILE
        tmp = path.with_name(RESTORE_FILE + ".tmp")
        tmp.write_text(json.dumps({"url": url, "settings": settings}, indent=2) + "\n", "utf-8")
        os.replace(tmp, path)
        env = dict(os.environ)
        env.pop(_TOKEN_ENV, None)
        if admin_token:
            env[_TOKEN_ENV] = admin_token
        child = start_child(
            "restore guard",
            python_argv("gate.orchestrator.restore_guard", [str(os.getpid()), str(path)]),
            log_path=run_dir / "restore_guard.log",
            env=env,
            parent_death_signal=None,  # it must outlive a killed batchgate: that is its job
        )
        return cls(child, path)

    def release(self) -> None:
        """The settings are back (or kept on purpose): no restore is owed any more."""
        self.path.unlink(missing_ok=True)
        self.child.stop(timeout_seconds=5.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gate.orchestrator.restore_guard")
    parser.add_argument("pid", type=int, help="the batchgate process to watch")
    parser.add_argument("restore_file", type=Path, help="<run>/restore.json")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # released: nothing owed
    while _alive(args.pid):
        time.sleep(_POLL_SECONDS)
    try:
        owed = json.loads(args.restore_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return 0  # batchgate restored the settings before it went
    except (OSError, ValueError) as exc:
        print(f"restore guard: cannot read {args.restore_file}: {exc}", file=sys.stderr)
        return 5
    from gate.orchestrator.live_preset import restore_settings

    line = restore_settings(
        owed["url"], owed.get("settings") or {}, admin_token=os.environ.get(_TOKEN_ENV)
    )
    print(line, file=sys.stderr, flush=True)
    owed.update(restored_by="guard", outcome=line, restored_at_wall=round(time.time(), 3))
    # On a full disk the stderr line (its log, if that can be written) is all that says it.
    with contextlib.suppress(OSError):
        args.restore_file.write_text(json.dumps(owed, indent=2) + "\n", encoding="utf-8")
    return 0 if "restored the batching settings" in line else 5


def _alive(pid: int) -> bool:
    # Started by batchgate itself: once it is gone this process is reparented (to init or a
    # subreaper). Unlike os.kill(pid, 0), that cannot be fooled by a reused pid.
    return os.getppid() == pid


if __name__ == "__main__":
    sys.exit(main())
