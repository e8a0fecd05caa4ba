"""Llama-format checkpoint directories: config.json plus *.safetensors with Hugging Face
LlamaForCausalLM tensor names, read into a LlamaForCausalLM and written back out.

It knows the file layout and the name/shape checks; it does not know devices beyond placing
tensors, nor tokenizers (a checkpoint meant for text output should use the byte vocabulary).
Every problem is a ConfigError on field "model_path" naming the file and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from reference_server.errors import ConfigError
from reference_server.model import LlamaForCausalLM, RotaryEmbedding
from reference_server.model_config import ModelConfig

__all__ = ["LoadedCheckpoint", "load_checkpoint", "save_checkpoint"]

_FIELD = "model_path"
# HF config.json key -> ModelConfig field.
_CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "intermediate_size": "intermediate_size",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_norm_eps",
    "max_position_embeddings": "max_position_embeddings",
    "tie_word_embeddings": "tie_word_embeddings",
}
_REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    model: LlamaForCausalLM
    config: ModelConfig
    eos_token_id: int | None  # from config.json; None when it names none
    name: str  # the directory's name


def _read_config(directory: Path) -> tuple[ModelConfig, int | None]:
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(_FIELD, f"{directory} has no config.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(_FIELD, f"{path} is not readable JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(_FIELD, f"{path} must hold a JSON object")
    if raw.get("model_type", "llama") != "llama":
        raise ConfigError(_FIELD, f"{path}: model_type {raw['model_type']!r} is not 'llama'")
    missing = [key for key in _REQUIRED_KEYS if key not in raw]
    if missing:
        raise ConfigError(_FIELD, f"{path} lacks {', '.join(missing)}")
    if raw.get("rope_scaling"):
        raise ConfigError(_FIELD, f"{path}: rope_scaling is not supported")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ConfigError(_FIELD, f"{path}: attention_bias / mlp_bias are not supported")
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(_FIELD, f"{path}: hidden_act must be 'silu'")
    fields = {field: raw[key] for key, field in _CONFIG_KEYS.items() if raw.get(key) is not None}
    fields.setdefault("num_kv_heads", fields["num_heads"])
    fields.setdefault("intermediate_size", 4 * fields["hidden_size"])
    try:
        config = ModelConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise ConfigError(_FIELD, f"{path}: {exc}") from None
    head_dim = raw.get("head_dim")
    if head_dim is not None and head_dim != config.head_dim:
        raise ConfigError(_FIELD, f"{path}: head_dim {head_dim} != hidden_size / heads")
    eos = raw.get("eos_token_id")
    if isinstance(eos, list):  # HF allows several; the first is the primary one
        eos = eos[0] if eos else None
    if eos is not None and (not isinstance(eos, int) or not 0 <= eos < config.vocab_size):
        raise ConfigError(_FIELD, f"{path}: eos_token_id {eos!r} is outside the vocabulary")
    return config, eos


def load_checkpoint(
    directory: str | Path,
    *,
    device: torch.device,
    dtype: torch.dtype,
    max_positions: int | None = None,
) -> LoadedCheckpoint:
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(_FIELD, f"{root} is not a directory")
    config, eos_token_id = _read_config(root)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ConfigError(_FIELD, f"{root} has no *.safetensors files")
    with torch.device("meta"):
        model = LlamaForCausalLM(config, max_positions=max_positions)
    expected = {name: p.shape for name, p in model.named_parameters()}
    loaded: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as handle:
                for name in handle.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                    if name.endswith(_IGNORED_SUFFIXES) or (
                        config.tie_word_embeddings and name == "lm_head.weight"
                    ):
                        continue
                    if name not in expected:
                        raise ConfigError(_FIELD, f"{file.name}: unexpected tensor {name!r}")
                    tensor = handle.get_tensor(name)
                    if tuple(tensor.shape) != tuple(expected[name]):
                        raise ConfigError(
                            _FIELD,
                            f"{file.name}: {name} has shape {tuple(tensor.shape)}, "
                            f"config.json implies {tuple(expected[name])}",
                        )
                    loaded[name] = tensor.to(device=device, dtype=dtype)
        except ConfigError:
            raise
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise ConfigError(
                _FIELD, f"{file.name} is not a readable safetensors file: {exc}"
            ) from None
    missing = sorted(set(expected) - set(loaded))
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ConfigError(_FIELD, f"{root} lacks {len(missing)} tensors: {shown}")
    model.load_state_dict(loaded, strict=False, assign=True)
    # The rotary tables are derived, not stored; build them for real on the target device.
    model.model.rotary = RotaryEmbedding(
        config.head_dim, model.max_positions, config.rope_theta
    ).to(device)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return LoadedCheckpoint(
        model=model.eval(), config=config, eos_token_id=eos_token_id, name=root.name
    )


def save_checkpoint(
    model: LlamaForCausalLM,
    directory: str | Path,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> Path:
    """Writes config.json and model.safetensors (HF names) into directory, creating it."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    config = model.config
    raw: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "torch_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "head_dim": config.head_dim,
    }
    for key, field in _CONFIG_KEYS.items():
        raw[key] = getattr(config, field)
    if bos_token_id is not None:
        raw["bos_token_id"] = bos_token_id
    if eos_token_id is not None:
        raw["eos_token_id"] = eos_token_id
    (root / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    tensors = {
        name: p.detach().to("cpu").contiguous()
        for name, p in model.named_parameters()  # shared (tied) weights appear once
    }
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    return root
