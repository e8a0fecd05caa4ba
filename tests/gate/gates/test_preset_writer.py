"""A tuned preset is added to a gates file as text: comments and layout stay, the name must be
new, and the file must still be a valid gates file."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.gates.file import load, packaged_gates_path
from gate.gates.preset_writer import PresetWriteError, add_preset, check_preset_target

MINIMAL = """\
version: 1   # keep me
presets:
  safe: {policy: continuous}   # and me

gates:
  - name: no_errors
    metric: errors
    statistic: count
    fail: "== 0"
"""


def test_added_into_the_presets_block_with_comments_kept(tmp_path: Path) -> None:
    path = tmp_path / "gates.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    preset = {"policy": "dynamic", "interactive": {"max_wait_ms": 5}}
    text = add_preset(path, MINIMAL, "tuned", preset, "batchgate tune, run-1")
    assert "# keep me" in text and "# and me" in text and "# batchgate tune, run-1" in text
    loaded = load(path)
    assert loaded.presets["tuned"] == preset and loaded.presets["safe"] == {"policy": "continuous"}
    assert text.index("tuned:") < text.index("gates:")


def test_a_file_without_presets_gets_the_block(tmp_path: Path) -> None:
    text = MINIMAL.replace("presets:\n  safe: {policy: continuous}   # and me\n", "")
    path = tmp_path / "g.yaml"
    add_preset(path, text, "tuned", {"max_num_seqs": 32}, "from a test")
    assert load(path).presets == {"tuned": {"max_num_seqs": 32}}


def test_the_packaged_file_takes_a_preset(tmp_path: Path) -> None:
    text = packaged_gates_path().read_text(encoding="utf-8")
    path = tmp_path / "gates.yaml"
    add_preset(path, text, "tuned", {"policy": "slo", "slo_target_ms": 12.5}, "from a test")
    loaded = load(path)
    assert loaded.presets["tuned"] == {"policy": "slo", "slo_target_ms": 12.5}
    assert set(load(packaged_gates_path()).presets) | {"tuned"} == set(loaded.presets)


def test_a_taken_name_or_an_invalid_preset_is_refused_and_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "gates.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    with pytest.raises(PresetWriteError, match="exists already"):
        add_preset(path, MINIMAL, "safe", {"policy": "static"}, "x")
    with pytest.raises(PresetWriteError, match="invalid"):
        add_preset(path, MINIMAL, "tuned", {"policy": "fastest"}, "x")
    assert path.read_text(encoding="utf-8") == MINIMAL


def test_the_files_own_indentation_is_kept(tmp_path: Path) -> None:
    text = MINIMAL.replace("  safe: {policy: continuous}", "    safe: {policy: continuous}")
    path = tmp_path / "gates.yaml"
    add_preset(path, text, "tuned", {"max_num_seqs": 32}, "from a test")
    assert "    tuned:" in path.read_text(encoding="utf-8")
    assert load(path).presets["tuned"] == {"max_num_seqs": 32}


def test_a_flow_style_presets_section_is_refused_before_any_work(tmp_path: Path) -> None:
    text = MINIMAL.replace("presets:\n  safe: {policy: continuous}   # and me\n",
                           "presets: {safe: {policy: continuous}}\n")  # fmt: skip
    path = tmp_path / "gates.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PresetWriteError, match="block mapping"):
        check_preset_target((path, path), "tuned")
    with pytest.raises(PresetWriteError, match="exists already"):
        check_preset_target((path, path), "safe")
