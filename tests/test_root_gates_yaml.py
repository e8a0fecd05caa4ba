"""The repository root's gates.yaml is the packaged default, byte for byte.

`batchgate run` from the repository reads ./gates.yaml before the packaged default, so a root
copy that drifted would make a clone judge with other gates than an installed package does.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_root_gates_yaml_is_the_packaged_default() -> None:
    packaged = ROOT / "gate" / "gates" / "default.yaml"
    root = ROOT / "gates.yaml"
    assert root.is_file(), "no gates.yaml at the repository root: run ./scripts/sync_gates_yaml"
    assert root.read_bytes() == packaged.read_bytes(), (
        "gates.yaml (repository root) differs from gate/gates/default.yaml, the source: "
        "edit gate/gates/default.yaml, then run ./scripts/sync_gates_yaml"
    )
