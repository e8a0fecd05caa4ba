"""Rollback: apply a preset through /admin/batching, roll forward, and map presets elsewhere."""

from __future__ import annotations

import copy
import json

import pytest
from fake_target import closed_port_url, running_target

from gate.cli import main
from gate.rollback.equivalents import equivalent_settings, format_equivalents
from gate.rollback.live import (
    AdminRefused,
    BatchingNotSupported,
    PresetRejected,
    TargetUnreachable,
    apply_preset,
)

DEFAULT_SETTINGS = {
    "policy": "dynamic",
    "max_num_seqs": 64,
    "max_num_batched_tokens": 2048,
    "interactive": {"max_batch_size": 16, "max_wait_ms": 20.0, "max_waiting": 256},
    "batch": {"max_batch_size": 32, "max_wait_ms": 50.0, "max_waiting": 1024},
}
KNOWN = {"policy", "max_num_seqs", "max_num_batched_tokens", "interactive", "batch"}

GATES = """\
version: 1
gates: []
presets:
  safe:
    policy: continuous
    max_num_seqs: 16
    interactive: {max_wait_ms: 0, max_batch_size: 8}
"""


class BatchingAdmin:
    """The server side of /admin/batching: validated partial updates, previous returned."""

    def __init__(self, *, token: str | None = None, answer_previous: bool = True) -> None:
        self.settings = copy.deepcopy(DEFAULT_SETTINGS)
        self.token = token
        self.answer_previous = answer_previous

    def _refused(self, req):
        return self.token and req.headers.get("Authorization") != f"Bearer {self.token}"

    def get(self, req):
        if self._refused(req):
            return 401, {"error": {"message": "admin token required"}}
        return 200, self.settings

    def put(self, req):
        if self._refused(req):
            return 403, {"error": {"message": "bad admin token"}}
        body = req.body
        for key, value in body.items():
            if key not in KNOWN:
                return 400, {"error": {"message": "unknown key", "param": key}}
            if key == "max_num_seqs" and (not isinstance(value, int) or value < 1):
                return 400, {"error": {"message": "must be an integer >= 1", "param": key}}
        previous = copy.deepcopy(self.settings)
        for key, value in body.items():
            if isinstance(value, dict):
                self.settings[key] = {**self.settings[key], **value}
            else:
                self.settings[key] = value
        if self.answer_previous:
            return 200, {"previous": previous, "current": self.settings}
        return 200, self.settings

    def install(self, target) -> None:
        target.route("GET", "/admin/batching", self.get)
        target.route("PUT", "/admin/batching", self.put)


@pytest.fixture
def target():
    with running_target() as t:
        yield t


@pytest.fixture
def gates_file(tmp_path):
    path = tmp_path / "gates.yaml"
    path.write_text(GATES)
    return path


def test_apply_changes_settings_and_returns_previous(target):
    admin = BatchingAdmin()
    admin.install(target)
    result = apply_preset(target.url, {"policy": "continuous", "max_num_seqs": 8})
    assert result.previous == DEFAULT_SETTINGS
    assert admin.settings["policy"] == "continuous" and admin.settings["max_num_seqs"] == 8
    apply_preset(target.url, result.previous)  # rolling forward is the same call
    assert admin.settings == DEFAULT_SETTINGS


def test_previous_comes_from_snapshot_when_put_answers_only_new_settings(target):
    admin = BatchingAdmin(answer_previous=False)
    admin.install(target)
    result = apply_preset(target.url, {"max_num_seqs": 4})
    assert result.previous == DEFAULT_SETTINGS
    assert result.current is None


def test_rejected_preset_names_the_field_and_changes_nothing(target):
    admin = BatchingAdmin()
    admin.install(target)
    with pytest.raises(PresetRejected, match="max_num_seqs"):
        apply_preset(target.url, {"max_num_seqs": 0})
    assert admin.settings == DEFAULT_SETTINGS


def test_admin_token_is_required_and_sent(target):
    admin = BatchingAdmin(token="t0k")
    admin.install(target)
    with pytest.raises(AdminRefused, match="--admin-token"):
        apply_preset(target.url, {"max_num_seqs": 4})
    apply_preset(target.url, {"max_num_seqs": 4}, admin_token="t0k")
    assert admin.settings["max_num_seqs"] == 4


def test_non_bundled_target_is_not_supported(target):
    with pytest.raises(BatchingNotSupported):
        apply_preset(target.url, {"max_num_seqs": 4})
    assert all(r.method == "GET" for r in target.requests)


def test_unreachable_target():
    with pytest.raises(TargetUnreachable, match="cannot reach"):
        apply_preset(closed_port_url(), {"max_num_seqs": 4}, timeout_seconds=1.0)


def test_empty_preset_is_refused():
    with pytest.raises(PresetRejected):
        apply_preset("http://127.0.0.1:9", {})


def test_command_applies_saves_previous_and_rolls_forward(target, gates_file, tmp_path, capsys):
    admin = BatchingAdmin()
    admin.install(target)
    saved = tmp_path / "prev.json"
    argv = ["rollback", "--target", target.url, "--to", "safe", "--gates", str(gates_file)]
    assert main([*argv, "--save-previous", str(saved)]) == 0
    assert admin.settings["policy"] == "continuous"
    assert admin.settings["interactive"]["max_batch_size"] == 8
    out = capsys.readouterr().out
    assert "Previous settings" in out and '"policy": "dynamic"' in out
    forward = f"batchgate rollback --target {target.url} --from-file {saved}"
    assert forward in out
    assert json.loads(saved.read_text())["settings"] == DEFAULT_SETTINGS
    back = tmp_path / "back.json"
    argv = ["rollback", "--target", target.url, "--from-file", str(saved)]
    assert main([*argv, "--save-previous", str(back)]) == 0
    assert admin.settings == DEFAULT_SETTINGS


def test_command_on_other_server_prints_equivalents_and_does_not_exit_0(target, gates_file, capsys):
    argv = ["rollback", "--target", target.url, "--to", "safe", "--gates", str(gates_file)]
    assert main(argv) == 5  # nothing was rolled back
    captured = capsys.readouterr()
    assert "not the bundled server: nothing was changed" in captured.err
    assert "--max-num-seqs 16" in captured.out
    assert "max_queue_delay_microseconds: 0" in captured.out
    assert "--max-batch-size 16" in captured.out
    assert all(r.method == "GET" for r in target.requests)


def test_command_unknown_preset_exits_2_listing_known(target, gates_file, capsys):
    argv = ["rollback", "--target", target.url, "--to", "fast", "--gates", str(gates_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'fast'" in err and "presets: safe" in err


def test_command_invalid_gates_file_exits_4(target, tmp_path, capsys):
    bad = tmp_path / "gates.yaml"
    bad.write_text("version: 1\npresets:\n  safe: {max_num_seqs: zero}\n")
    argv = ["rollback", "--target", target.url, "--to", "safe", "--gates", str(bad)]
    assert main(argv) == 4
    assert "max_num_seqs" in capsys.readouterr().err


def test_command_missing_gates_file_exits_2(target, tmp_path, capsys):
    argv = ["rollback", "--target", target.url, "--to", "safe", "--gates", str(tmp_path / "no")]
    assert main(argv) == 2
    assert "not found" in capsys.readouterr().err


def test_command_unreachable_and_refused_exit_2(gates_file, target, capsys):
    argv = ["rollback", "--to", "safe", "--gates", str(gates_file), "--timeout", "1"]
    assert main([*argv, "--target", closed_port_url()]) == 2
    assert "cannot reach" in capsys.readouterr().err
    BatchingAdmin(token="x").install(target)
    assert main([*argv, "--target", target.url]) == 2
    assert "HTTP 401" in capsys.readouterr().err


def test_command_bad_saved_file_exits_2(target, tmp_path, capsys):
    saved = tmp_path / "prev.json"
    saved.write_text('{"nothing": 1}')
    assert main(["rollback", "--target", target.url, "--from-file", str(saved)]) == 2
    assert "no 'settings'" in capsys.readouterr().err


def test_equivalents_cover_every_key_for_every_server():
    preset = {
        "policy": "dynamic",
        "max_num_seqs": 32,
        "max_num_batched_tokens": 4096,
        "interactive": {"max_wait_ms": 2.5, "max_batch_size": 8, "max_waiting": 100},
        "kv_cache_memory_bytes": 2**30,
    }
    eq = equivalent_settings(preset)
    keys = {"policy", "max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes"}
    keys |= {"interactive.max_wait_ms", "interactive.max_batch_size", "interactive.max_waiting"}
    for server in ("vllm", "triton", "tgi", "llamacpp"):
        assert {e.key for e in eq[server]} == keys
    by = {(e.server, e.key): e for items in eq.values() for e in items}
    assert by["vllm", "max_num_seqs"].setting == "--max-num-seqs 32"
    assert by["vllm", "max_num_batched_tokens"].setting == "--max-num-batched-tokens 4096"
    assert by["vllm", "policy"].setting is None  # vLLM has no request-level dynamic batching
    assert by["triton", "policy"].setting == "dynamic_batching { }"
    assert "max_queue_delay_microseconds: 2500" in by["triton", "interactive.max_wait_ms"].setting
    assert by["triton", "interactive.max_wait_ms"].exact is False  # one delay per model
    assert "priority_queue_policy { key: 1" in by["triton", "interactive.max_waiting"].setting
    assert by["tgi", "max_num_seqs"].setting == "--max-batch-size 32"
    assert by["tgi", "interactive.max_wait_ms"].setting is None
    assert by["llamacpp", "max_num_seqs"].setting == "--parallel 32"
    assert by["llamacpp", "max_num_batched_tokens"].setting == "--batch-size 4096"
    assert by["llamacpp", "policy"].setting == "--no-cont-batching"  # dynamic: nearest only
    assert by["llamacpp", "policy"].exact is False
    assert by["llamacpp", "interactive.max_wait_ms"].setting is None  # no classes, no window
    text = format_equivalents("x", preset)
    assert "llama.cpp (llama-server flags)" in text
    assert "no equivalent" in text and "(nearest)" in text


def test_a_null_dispatch_threshold_maps_to_no_preferred_batch_size_on_triton():
    from gate.rollback.equivalents import equivalent_settings

    rows = equivalent_settings({"interactive": {"dispatch_threshold": None}})["triton"]
    (row,) = [r for r in rows if r.key == "interactive.dispatch_threshold"]
    assert "None" not in (row.setting or "")
    assert "preferred_batch_size" in (row.setting or "")


def test_presets_accept_null_dispatch_threshold_and_refuse_zero(tmp_path):
    import pytest

    from gate.gates.file import load
    from gate.gates.reader import GatesFileError

    good = tmp_path / "good.yaml"
    good.write_text(
        "version: 1\npresets:\n  safe:\n    interactive: {dispatch_threshold: null}\ngates: []\n"
    )
    assert load(good).presets["safe"]["interactive"]["dispatch_threshold"] is None
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\npresets:\n  safe:\n    interactive: {dispatch_threshold: 0}\ngates: []\n"
    )
    with pytest.raises(GatesFileError, match="dispatch_threshold"):
        load(bad)
