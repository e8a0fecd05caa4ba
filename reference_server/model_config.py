"""The decoder's shape: a keyword-only ModelConfig and the named presets.

It knows the architecture numbers only (no tensors, no checkpoint files, no devices).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from reference_server.tokenizer import ByteTokenizer

__all__ = ["MODEL_PRESETS", "ModelConfig", "get_preset"]

_BYTE_VOCAB_SIZE = ByteTokenizer().vocab_size


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Llama-style decoder: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError("ModelConfig.hidden_size must be divisible by num_heads")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("ModelConfig.num_heads must be divisible by num_kv_heads")
        if self.head_dim % 2:
            raise ValueError("ModelConfig head_dim (hidden_size / num_heads) must be even for RoPE")
        for name in ("rope_theta", "rms_norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive number, got {value!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def num_parameters(self) -> int:
        h, d = self.hidden_size, self.head_dim
        attention = h * self.num_heads * d * 2 + h * self.num_kv_heads * d * 2
        mlp = 3 * h * self.intermediate_size
        per_layer = attention + mlp + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embeddings + h

    def kv_bytes_per_token(self, *, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


MODEL_PRESETS: dict[str, ModelConfig] = {
    # Small enough that a 2-core CPU decodes 64 sequences in a few milliseconds per step.
    "tiny": ModelConfig(
        vocab_size=_BYTE_VOCAB_SIZE,
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=352,
    ),
    # 2-3x slower per token than tiny on a CPU (benchmarks/bench_slo.py's default: its prefill
    # costs enough next to a decode to plan around).
    "small": ModelConfig(
        vocab_size=_BYTE_VOCAB_SIZE,
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=704,
    ),
    # small with twice the layers: on this project's 2-core CI machine 3x or more below tiny's
    # capacity and lone-request speed, the ">= 3x slower server" of the speed-invariance matrix.
    "medium": ModelConfig(
        vocab_size=_BYTE_VOCAB_SIZE,
        hidden_size=256,
        num_layers=8,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=704,
    ),
    # ~100M parameters: KV memory pressure becomes realistic on a GPU.
    "100m": ModelConfig(
        vocab_size=_BYTE_VOCAB_SIZE,
        hidden_size=768,
        num_layers=16,
        num_heads=12,
        num_kv_heads=4,
        intermediate_size=2048,
    ),
    # ~1B parameters, TinyLlama-like shape with the byte vocabulary.
    "1b": ModelConfig(
        vocab_size=_BYTE_VOCAB_SIZE,
        hidden_size=2048,
        num_layers=22,
        num_heads=32,
        num_kv_heads=4,
        intermediate_size=5632,
    ),
}


def get_preset(name: str) -> ModelConfig:
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_PRESETS))
        raise ValueError(f"unknown model preset {name!r}; known presets: {known}") from None
