"""The gates a run judges, and the copy of them it keeps in its run directory.

Owns selecting the gates that apply to the profiles being run (a gate scoped to profiles that
are not run, or comparing to a reference profile that is not run, is skipped and listed, so
`--profile burst` judges the burst gates instead of reporting "no data" for the rest) and
dropping, from the packaged default suite only, the gates the target cannot measure (listed with
the reason: a user's own gate on such a metric stays and is judged "no data", never pass), and
writing the effective gates file into the run directory (`gates.yaml`; the original text when
nothing is skipped), which manifest.json names so `batchgate check RUN_DIR` judges exactly the
same gates again. It does not evaluate anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from gate.gates.file import loads
from gate.gates.spec import Gate, GatesFile

__all__ = ["Suite", "orphaned_profiles", "select_suite"]

SUITE_FILE = "gates.yaml"


@dataclass(frozen=True, kw_only=True)
class Suite:
    gates_file: GatesFile  # the effective gates, read back from `path`
    path: Path
    source: str  # the gates file the user gave
    skipped: tuple[str, ...]  # "name (why)"


def _needs(gate: Gate) -> set[str]:
    needed = set(gate.relative_to.profile or ()) if gate.relative_to is not None else set()
    return needed


def _skip_reason(
    gate: Gate, profiles: set[str], unmeasurable: Mapping[str, str] | None = None
) -> str | None:
    if unmeasurable and gate.name in unmeasurable:
        return f"{gate.name} ({unmeasurable[gate.name]})"
    scoped = set(gate.scope.profile or ())
    if scoped and not scoped & profiles:
        return f"{gate.name} (profile {', '.join(sorted(scoped))} not run)"
    missing = _needs(gate) - profiles
    if missing:
        return f"{gate.name} (reference profile {', '.join(sorted(missing))} not run)"
    return None


def orphaned_profiles(original: GatesFile, effective: GatesFile) -> list[str]:
    """Profiles that gates of `original` were scoped to (or compared with) and no gate of
    `effective` is: every gate on them was left out."""

    def named(gates_file: GatesFile) -> set[str]:
        found: set[str] = set()
        for gate in gates_file.gates:
            found.update(gate.scope.profile or ())
            found.update(_needs(gate))
        return found

    return sorted(named(original) - named(effective))


def select_suite(
    gates_file: GatesFile,
    source_text: str,
    profiles: Sequence[str],
    run_dir: Path,
    *,
    unmeasurable: Mapping[str, str] | None = None,
) -> Suite:
    """Write `run_dir/gates.yaml` with the gates that apply to `profiles` (and, when given,
    that the target can measure: `unmeasurable` maps gate names to why not); return them."""
    chosen = set(profiles)
    skipped = [
        reason for g in gates_file.gates if (reason := _skip_reason(g, chosen, unmeasurable))
    ]
    text = source_text
    if skipped:
        data = yaml.safe_load(source_text)
        keep = {g.name for g in gates_file.gates if _skip_reason(g, chosen, unmeasurable) is None}
        data["gates"] = [g for g in data.get("gates") or [] if g.get("name") in keep]
        header = (
            f"# Effective gates of this run: {gates_file.path} without the gates that apply to\n"
            f"# profiles not run or that this target cannot measure "
            f"({', '.join(s.split(' ', 1)[0] for s in skipped)}).\n"
        )
        text = header + yaml.safe_dump(data, sort_keys=False)
    path = run_dir / SUITE_FILE
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return Suite(
        gates_file=loads(text, path=str(path)),
        path=path,
        source=str(Path(gates_file.path)),
        skipped=tuple(skipped),
    )
