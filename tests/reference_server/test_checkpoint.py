"""Llama-format safetensors checkpoints: round trip, runner loading, EOS policy, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from reference_server.attention import build_attention_metadata
from reference_server.checkpoint import load_checkpoint, save_checkpoint
from reference_server.errors import ConfigError
from reference_server.model import build_random_model
from reference_server.model_config import ModelConfig, get_preset
from reference_server.model_runner import ModelRunner
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import ScheduledChunk, Sequence


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    # On a shared, oversubscribed CPU box torch's two OpenMP threads stall at every barrier
    # (measured: this module ran 2.6x slower and burned 2.4x the CPU); restored afterwards.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


CPU = torch.device("cpu")
SMALL = ModelConfig(
    vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


def _logits(model, ids: list[int]) -> torch.Tensor:
    cfg = model.config
    block_size = 8
    num_blocks = (len(ids) + block_size - 1) // block_size
    kv = torch.zeros(cfg.num_layers, 2, cfg.num_kv_heads, num_blocks, block_size, cfg.head_dim)
    metadata = build_attention_metadata(
        query_lens=[len(ids)],
        context_lens=[len(ids)],
        block_tables=torch.arange(num_blocks)[None],
        block_size=block_size,
    )
    with torch.inference_mode():
        return model.compute_logits(model(torch.tensor(ids), list(kv.unbind(0)), metadata))


def test_saved_then_loaded_model_computes_the_same_logits(tmp_path: Path) -> None:
    original = build_random_model(SMALL, seed=5, device=CPU, dtype=torch.float32)
    save_checkpoint(original, tmp_path, bos_token_id=256, eos_token_id=257)
    loaded = load_checkpoint(tmp_path, device=CPU, dtype=torch.float32)
    assert loaded.config == SMALL
    assert loaded.eos_token_id == 257
    ids = [3, 200, 17, 99, 4, 5, 6, 7, 8, 250, 1]
    assert torch.equal(_logits(loaded.model, ids), _logits(original, ids))


def test_tied_embeddings_load_without_an_lm_head_tensor(tmp_path: Path) -> None:
    tied = ModelConfig(**(SMALL.to_dict() | {"tie_word_embeddings": True}))
    original = build_random_model(tied, seed=1, device=CPU, dtype=torch.float32)
    save_checkpoint(original, tmp_path)
    assert "lm_head.weight" not in load_file(str(tmp_path / "model.safetensors"))
    loaded = load_checkpoint(tmp_path, device=CPU, dtype=torch.float32)
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight
    assert torch.equal(_logits(loaded.model, [1, 2, 3]), _logits(original, [1, 2, 3]))


def test_runner_loading_a_checkpoint_generates_like_the_preset_it_came_from(tmp_path: Path) -> None:
    preset = ModelRunner(model="tiny", device="cpu", seed=3, kv_cache_memory_bytes=4 << 20)
    save_checkpoint(preset.model, tmp_path / "tiny-copy", eos_token_id=257)
    loaded = ModelRunner(
        model_path=str(tmp_path / "tiny-copy"), device="cpu", kv_cache_memory_bytes=4 << 20
    )
    assert loaded.model_name == "tiny-copy" and not loaded.is_synthetic
    assert loaded.model_config == get_preset("tiny")
    for runner in (preset, loaded):
        seq = Sequence(
            "r",
            list(b"hello world"),
            SamplingParams(temperature=0.0, seed=1),
            priority="interactive",
            arrival_time=0.0,
        )
        seq.block_table = [0]
        runner.execute([ScheduledChunk(seq, seq.num_tokens, True)])
    ids = list(b"hello world")
    assert torch.equal(_logits(preset.model, ids), _logits(loaded.model, ids))


def _draw_first_tokens(runner: ModelRunner, *, ignore_eos: bool) -> list[int]:
    seqs = []
    for i in range(600):
        params = SamplingParams(temperature=50.0, seed=i, ignore_eos=ignore_eos)
        seq = Sequence(f"q{i}", [i % 256], params, priority="interactive", arrival_time=0.0)
        seq.block_table = [i]
        seqs.append(seq)
    return runner.execute([ScheduledChunk(s, 1, True) for s in seqs])  # type: ignore[return-value]


def test_loaded_checkpoint_may_emit_eos_unless_the_request_ignores_it(tmp_path: Path) -> None:
    preset = ModelRunner(model="tiny", device="cpu", seed=3, kv_cache_memory_bytes=16 << 20)
    save_checkpoint(preset.model, tmp_path, eos_token_id=257)
    loaded = ModelRunner(model_path=str(tmp_path), device="cpu", kv_cache_memory_bytes=16 << 20)
    assert loaded.eos_token_id in _draw_first_tokens(loaded, ignore_eos=False)
    assert loaded.eos_token_id not in _draw_first_tokens(loaded, ignore_eos=True)
    assert max(_draw_first_tokens(preset, ignore_eos=False)) < 256


def _write(tmp_path: Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def _valid(tmp_path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    model = build_random_model(SMALL, seed=0, device=CPU, dtype=torch.float32)
    save_checkpoint(model, tmp_path)
    return json.loads((tmp_path / "config.json").read_text()), load_file(
        str(tmp_path / "model.safetensors")
    )


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no_config", "no config.json"),
        ("no_weights", "no \\*.safetensors"),
        ("wrong_shape", "has shape"),
        ("missing_tensor", "lacks 1 tensors"),
        ("extra_tensor", "unexpected tensor"),
        ("not_llama", "not 'llama'"),
        ("bad_json", "not readable JSON"),
        ("corrupt_weights", "not a readable safetensors"),
    ],
)
def test_broken_checkpoints_raise_config_error_on_model_path(
    tmp_path: Path, breakage: str, message: str
) -> None:
    config, tensors = _valid(tmp_path)
    if breakage == "no_config":
        (tmp_path / "config.json").unlink()
    elif breakage == "no_weights":
        (tmp_path / "model.safetensors").unlink()
    elif breakage == "wrong_shape":
        tensors["model.norm.weight"] = torch.ones(5)
        _write(tmp_path, config, tensors)
    elif breakage == "missing_tensor":
        del tensors["model.layers.1.mlp.up_proj.weight"]
        _write(tmp_path, config, tensors)
    elif breakage == "extra_tensor":
        tensors["model.layers.9.mlp.up_proj.weight"] = torch.ones(2)
        _write(tmp_path, config, tensors)
    elif breakage == "not_llama":
        _write(tmp_path, config | {"model_type": "gpt2"}, tensors)
    elif breakage == "bad_json":
        (tmp_path / "config.json").write_text("{nope")
    elif breakage == "corrupt_weights":
        (tmp_path / "model.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(ConfigError, match=message) as info:
        load_checkpoint(tmp_path, device=CPU, dtype=torch.float32)
    assert info.value.field == "model_path"


def test_rotary_inv_freq_buffers_from_older_exports_are_ignored(tmp_path: Path) -> None:
    config, tensors = _valid(tmp_path)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    _write(tmp_path, config, tensors)
    assert load_checkpoint(tmp_path, device=CPU, dtype=torch.float32).config == SMALL
