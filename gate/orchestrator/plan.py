"""Which profiles a run executes, with which parameter overrides, at which scale.

Owns choosing the profiles (`--profile`, else the gates file's `profiles:` section, else the
profiles its gates are scoped to, else the seed scenarios), merging the gates file's overrides
with the command line's (`--set profile.key=value`), and resolving each through the load
generator itself (`python -m loadgen --show-profile`, a child process: `gate` never imports
`loadgen`), so a bad override is a usage error before anything starts. It does not run loads.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate.errors import BatchgateError, ExitCode
from gate.gates.spec import GatesFile
from gate.orchestrator.processes import python_argv
from gate.orchestrator.relative import RelativeError, placeholders, relative_values

__all__ = ["DEFAULT_PROFILES", "PlanError", "ProfilePlan", "choose_profiles", "resolve_plans"]

DEFAULT_PROFILES = ("night_trickle", "burst", "mixed_lengths", "priority_mix")
_DURATION_KEYS = ("main_seconds", "baseline_seconds", "spike_seconds", "recovery_seconds")


class PlanError(BatchgateError, ValueError):
    """A profile list or override that cannot run (a usage error, exit 2)."""

    default_exit_code = ExitCode.USAGE


@dataclass(frozen=True, kw_only=True)
class ProfilePlan:
    name: str
    overrides: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)  # resolved by the load generator
    # Overrides written relative to the calibration ("0.3x capacity", "400 requests"); until
    # `gate.orchestrator.relative.absolute_overrides` resolves them, `overrides` and `params`
    # hold placeholders.
    relative: dict[str, str] = field(default_factory=dict)

    @property
    def duration_seconds(self) -> float | None:
        """Length of the load schedule (the live view's progress), when the params say."""
        if isinstance(self.params.get("duration_seconds"), (int, float)):
            return float(self.params["duration_seconds"])
        total = sum(float(self.params[k]) for k in _DURATION_KEYS if k in self.params)
        return total or None


def choose_profiles(gates_file: GatesFile, requested: str | None) -> list[str]:
    if requested is not None:
        names = [n.strip() for n in requested.split(",") if n.strip()]
        if not names:
            raise PlanError("--profile names no profile")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PlanError(f"--profile repeats {', '.join(duplicates)}")
        return names
    if gates_file.profiles:
        return list(gates_file.profiles)
    scoped: list[str] = []
    for gate in gates_file.gates:
        for name in gate.scope.profile or ():
            if name not in scoped:
                scoped.append(name)
    return scoped or list(DEFAULT_PROFILES)


def parse_sets(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`--set PROFILE.KEY=VALUE` (VALUE as JSON when it parses) into per-profile overrides."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        profile, dot, param = key.partition(".")
        if not sep or not dot or not profile or not param:
            raise PlanError(f"--set needs PROFILE.KEY=VALUE, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(profile, {})[param] = value
    return out


def resolve_plans(
    names: Sequence[str],
    gates_file: GatesFile,
    *,
    scale: str,
    extra_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    timeout_seconds: float = 60.0,
) -> list[ProfilePlan]:
    """Each profile's overrides, resolved by `python -m loadgen --show-profile` (in parallel)."""
    overrides = {
        name: {**gates_file.profiles.get(name, {}), **(extra_overrides or {}).get(name, {})}
        for name in names
    }
    unknown = sorted(set(extra_overrides or {}) - set(names))
    if unknown:
        raise PlanError(f"--set names profiles that are not run: {', '.join(unknown)}")
    try:
        relative = {name: relative_values(name, overrides[name]) for name in names}
    except RelativeError as exc:
        raise PlanError(str(exc)) from None
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        for name in names:
            argv = python_argv(
                "loadgen",
                [
                    "--profile",
                    name,
                    "--scale",
                    scale,
                    "--show-profile",
                    "--profile-overrides-json",
                    "/dev/stdin",
                ],
            )
            try:
                children[name] = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            except OSError as exc:
                raise PlanError(f"cannot start the load generator: {exc}") from exc
        return [
            dataclasses.replace(
                _collect(
                    name, child, placeholders(overrides[name], relative[name]), timeout_seconds
                ),
                relative=relative[name],
            )
            for name, child in children.items()
        ]
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()


def _collect(
    name: str, child: subprocess.Popen[str], overrides: dict[str, Any], timeout_seconds: float
) -> ProfilePlan:
    try:
        stdout, stderr = child.communicate(json.dumps(overrides), timeout=timeout_seconds)
    except subprocess.TimeoutExpired as exc:
        raise PlanError(f"the load generator did not describe profile {name!r} in time") from exc
    if child.returncode != 0:
        message = (stderr.strip().splitlines() or ["no message"])[-1]
        raise PlanError(f"profile {name!r}: {message.removeprefix('loadgen: error: ')}")
    try:
        params = json.loads(stdout)
    except ValueError as exc:
        raise PlanError(f"profile {name!r}: the load generator printed no JSON") from exc
    return ProfilePlan(name=name, overrides=dict(overrides), params=params)
