"""Where `batchgate tune` puts its winning preset: always into its own directory (preset.yaml and
a copy of the gates file with it), into another gates file only with --write-gates, and never
into ./gates.yaml on its own (that file would judge every later `batchgate run` there)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from gate.gates.file import load, packaged_gates_path
from gate.gates.preset_writer import PresetWriteError, check_preset_target
from gate.outputs.tune_report import preset_instructions
from gate.tune.candidate import Candidate
from gate.tune.preset import preset_target, write_winner

WINNER = Candidate(settings={"policy": "continuous", "interactive.max_wait_ms": 5}, origin="coarse")


def _args(gates: Path, write_gates: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        gates=gates,
        write_gates=write_gates,
        profile="night_trickle",
        preset_name="tuned",
        preset=None,
        target=None,
        server_cmd=None,
    )


def _preset_target(args: argparse.Namespace) -> tuple[Path, Path]:
    return preset_target(args.gates, args.write_gates)


def _write_preset(
    args: argparse.Namespace, tune_dir: Path, winner: Candidate
) -> tuple[Path, Path, Path | None]:
    """What `batchgate tune` does with its winner on a --target (no start preset under it)."""
    return write_winner(
        name=args.preset_name,
        profile=args.profile,
        settings=winner.settings,
        start_preset=None,
        tune_dir=tune_dir,
        gates=args.gates,
        write_gates=args.write_gates,
    )


def test_without_write_gates_the_preset_stays_in_the_tune_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tune_dir = tmp_path / "runs" / "tune-1"
    tune_dir.mkdir(parents=True)
    args = _args(packaged_gates_path())
    check_preset_target(_preset_target(args), "tuned")  # what `run` checks first
    block, copy, added_to = _write_preset(args, tune_dir, WINNER)

    assert not (tmp_path / "gates.yaml").exists()  # nothing in the working directory
    assert (
        added_to is None and block == tune_dir / "preset.yaml" and copy == tune_dir / "gates.yaml"
    )
    preset = {"policy": "continuous", "interactive": {"max_wait_ms": 5}}
    assert yaml.safe_load(block.read_text())["presets"]["tuned"] == preset
    assert "# batchgate tune --profile night_trickle, tune-1" in block.read_text()
    # The copy is the packaged gates plus the preset: `run --gates COPY --preset tuned` works.
    copied = load(copy)
    assert copied.presets["tuned"] == preset
    assert set(copied.presets) - {"tuned"} == set(load(packaged_gates_path()).presets)
    assert packaged_gates_path().read_text().count("tuned:") == 0  # the packaged file untouched

    lines = preset_instructions("tuned", block, copy, added_to)
    assert lines[0] == f"preset 'tuned' written to {block}"
    assert f"batchgate run --gates {copy} --preset tuned" in "\n".join(lines)
    assert "--write-gates FILE" in "\n".join(lines)


def test_a_users_gates_file_is_not_changed_without_write_gates(tmp_path):
    gates = tmp_path / "mine.yaml"
    gates.write_text(packaged_gates_path().read_text())
    before = gates.read_text()
    tune_dir = tmp_path / "tune-2"
    tune_dir.mkdir()
    _, copy, added_to = _write_preset(_args(gates), tune_dir, WINNER)
    assert gates.read_text() == before and added_to is None
    assert "tuned" in load(copy).presets


def test_write_gates_adds_the_preset_to_that_file_too(tmp_path):
    target = tmp_path / "team.yaml"  # does not exist yet: made from the --gates file
    tune_dir = tmp_path / "tune-3"
    tune_dir.mkdir()
    block, copy, added_to = _write_preset(_args(packaged_gates_path(), target), tune_dir, WINNER)
    assert added_to == target and load(target).presets["tuned"] == load(copy).presets["tuned"]
    assert block.exists()
    assert "added to" in "\n".join(preset_instructions("tuned", block, copy, added_to))


def test_a_preset_name_the_gates_file_has_is_refused_before_the_search(tmp_path):
    gates = tmp_path / "mine.yaml"
    gates.write_text(packaged_gates_path().read_text())
    taken = next(iter(load(gates).presets))
    with pytest.raises(PresetWriteError, match="exists already"):
        check_preset_target(_preset_target(_args(gates)), taken)
