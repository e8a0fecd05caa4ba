"""The default gates file ships in the package: commands work from any directory, and
`batchgate init` writes a copy to start from."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.cli import main
from gate.commands._common import default_gates_path
from gate.gates.file import load, packaged_gates_path


def test_the_packaged_default_is_used_outside_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_gates_path() == packaged_gates_path()
    gates = load(default_gates_path())
    assert {"safe", "big_window", "static", "small_kv", "shared_queue"} <= set(gates.presets)


def test_a_local_gates_yaml_wins_over_the_packaged_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("gates.yaml").write_text("version: 1\n", encoding="utf-8")
    assert default_gates_path() == Path("gates.yaml")


def test_init_writes_the_commented_default_and_refuses_to_overwrite(tmp_path, capsys):
    target = tmp_path / "gates.yaml"
    assert main(["init", str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    assert text == packaged_gates_path().read_text(encoding="utf-8")
    assert "# " in text and load(target).gates
    assert main(["init", str(target)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["init", str(target), "--force"]) == 0


def test_every_default_gate_is_speed_invariant():
    """No absolute time threshold in the default file: relative, ratio, or waste only."""
    gates = load(packaged_gates_path())
    for gate in gates.gates:
        for threshold in (gate.fail, gate.warn):
            if threshold is None:
                continue
            if threshold.kind.value == "duration":
                assert threshold.reference == "unloaded", gate.name
    for name, overrides in gates.profiles.items():
        for key, value in overrides.items():
            if key.endswith("_rate_rps"):
                assert isinstance(value, str), f"{name}.{key} is absolute"


@pytest.mark.parametrize("verb", ["run", "calibrate", "sweep"])
def test_a_missing_gates_file_is_a_usage_error(tmp_path, verb, capsys):
    assert main([verb, "--gates", str(tmp_path / "nope.yaml")]) == 2
    assert "no such gates file" in capsys.readouterr().err
