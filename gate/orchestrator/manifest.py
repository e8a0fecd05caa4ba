"""`manifest.json`: the provenance of a run (docs/records.md), written at the start and the end.

Owns what goes into it (tool version and git sha, target, hardware, resolved profile parameters
and their hashes, gates file and hash, wall-clock times, scale, preset, how the run ended and
why) and writing it atomically, so a run killed at any moment leaves a readable manifest. It
does not decide how the run ended; the session tells it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ENDED_VALUES", "MANIFEST_SCHEMA_VERSION", "Manifest", "hardware", "tool_info"]

MANIFEST_SCHEMA_VERSION = 1
# `aborted`: an abort_on_fail gate stopped the run (a judged failure, not a fault).
ENDED_VALUES = (
    "running",
    "completed",
    "aborted",
    "interrupted",
    "target_died",
    "load_crashed",
    "write_failed",  # the run directory could not be written (full disk, quota, read-only)
)


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def tool_info() -> dict[str, str | None]:
    """batchgate's version and, in a git checkout, the commit it runs from."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        tool_version: str | None = version("batchgate")
    except PackageNotFoundError:
        tool_version = None
    repo = Path(__file__).resolve().parents[2]
    sha = None
    try:
        result = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5.0,
            check=False,
        )
        if result.returncode == 0:
            sha = result.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        sha = None  # no git, or not a checkout (an installed wheel): the version must do
    return {"version": tool_version, "git_sha": sha}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpu() -> tuple[str | None, str | None]:
    try:
        import pynvml  # nvidia-ml-py; no torch, so `gate` stays light
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except Exception:  # any NVMLError: no driver, no device
        return None, None
    try:
        count = pynvml.nvmlDeviceGetCount()
        names = []
        for index in range(count):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        return (", ".join(names) or None), driver
    except Exception:
        return None, None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def hardware() -> dict[str, Any]:
    gpu, driver = _gpu()
    return {"cpu": _cpu_name(), "cpu_count": os.cpu_count(), "gpu": gpu, "driver": driver}


@dataclass(kw_only=True)
class Manifest:
    path: Path
    gates_file: str
    gates_hash: str
    scale: str
    preset: str | None
    target: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    observers: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    started_at: str = field(default_factory=_now_iso)
    ended_at: str | None = None
    ended: str = "running"
    reason: str | None = None
    tool: dict[str, str | None] = field(default_factory=tool_info)
    hardware: dict[str, Any] = field(default_factory=hardware)

    def finish(self, ended: str, reason: str | None) -> None:
        if ended not in ENDED_VALUES or ended == "running":
            raise ValueError(f"a run ends as one of {ENDED_VALUES[1:]}, not {ended!r}")
        self.ended, self.reason, self.ended_at = ended, reason, _now_iso()

    def add_profile(
        self, name: str, load: dict[str, Any] | None, overrides: dict[str, Any]
    ) -> None:
        load = load or {}
        self.profiles[name] = {
            "params": load.get("params"),
            "params_hash": load.get("params_hash"),
            "overrides": overrides,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "tool": self.tool,
            "target": self.target,
            "hardware": self.hardware,
            "profiles": self.profiles,
            "gates_file": self.gates_file,
            "gates_hash": self.gates_hash,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "scale": self.scale,
            "preset": self.preset,
            # A run still going (or killed without a chance to finish) reads as not completed.
            "ended": self.ended,
            "reason": self.reason,
            "observers": self.observers,
            **self.extra,
        }

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)  # readers never see half a manifest
