"""The winner of `batchgate tune` as a named preset, and the files it is written into.

Owns where it goes: always into the tune directory, as a block of its own (preset.yaml) and
inside a copy of the --gates file (gates.yaml); into another gates file only with --write-gates
(made from the --gates file when it does not exist yet); never into ./gates.yaml unless asked (a
gates file in the working directory would from then on judge every `batchgate run` there). On the
bundled server the candidates ran on top of the start preset, so the winner includes it and
`run --preset NAME` on a fresh server runs what was measured. It does not search or print.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gate.gates.preset_writer import add_preset, preset_block
from gate.tune.space import preset_of

__all__ = ["PRESET_FILE", "preset_target", "write_winner"]

PRESET_FILE = "preset.yaml"
GATES_COPY = "gates.yaml"


def preset_target(gates: Path, write_gates: Path | None) -> tuple[Path, Path]:
    """(the gates file the winner is added to, the text it starts from): `write_gates` (made
    from `gates` when it does not exist yet); without it, the copy of `gates` in the tune
    directory (written at the end), checked as `gates` itself."""
    if write_gates is None:
        return gates, gates
    return write_gates, (write_gates if write_gates.is_file() else gates)


def write_winner(
    *,
    name: str,
    profile: str,
    settings: Mapping[str, Any],
    start_preset: Mapping[str, Any] | None,
    tune_dir: Path,
    gates: Path,
    write_gates: Path | None,
) -> tuple[Path, Path, Path | None]:
    """(preset.yaml, the gates file copy holding it, the `write_gates` file or None); each
    says in a comment which search made it."""
    comment = f"batchgate tune --profile {profile}, {tune_dir.name}"
    preset = preset_of(settings, start_preset)
    block = tune_dir / PRESET_FILE
    block.write_text(preset_block(name, preset, comment), encoding="utf-8")
    copy = tune_dir / GATES_COPY
    add_preset(copy, gates.read_text(encoding="utf-8"), name, preset, comment)
    if write_gates is None:
        return block, copy, None
    target, source = preset_target(gates, write_gates)
    add_preset(target, source.read_text(encoding="utf-8"), name, preset, comment)
    return block, copy, target
