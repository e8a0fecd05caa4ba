"""The Llama-style decoder: RMSNorm, rotary position embeddings, SwiGLU MLP and grouped-query
attention over a paged KV pool, with Hugging Face Llama parameter names.

It knows the network and seeded random initialisation; it does not know block allocation,
sampling, checkpoint files or which rows of a step sample (the model runner decides that).
"""

from __future__ import annotations

import torch
from torch import nn

from reference_server.attention import AttentionMetadata, paged_attention
from reference_server.batch_invariant import row_padded_linear
from reference_server.model_config import ModelConfig

__all__ = ["LlamaForCausalLM", "build_random_model"]


class Linear(nn.Linear):
    """nn.Linear (same parameters and state-dict keys) whose row count can be padded to
    batch_invariant.ROW_QUANTUM, so each row's result is the same in any batch."""

    row_padded = False  # set on every layer by LlamaForCausalLM.set_batch_invariant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.row_padded:
            return row_padded_linear(x, self.weight)
        return super().forward(x)


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: bf16's short mantissa makes the mean of squares drift.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for every position up to max_positions, in the rotate-half layout HF uses."""

    cos: torch.Tensor  # (max_positions, head_dim)
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)  # (max_positions, head_dim)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (T, 1, head_dim) each, broadcast over heads
        return self.cos[positions, None].to(dtype), self.sin[positions, None].to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        h = config.hidden_size
        self.q_proj = Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(
        self,
        hidden: torch.Tensor,  # (T, hidden)
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv_layer: torch.Tensor,  # (2, kv_heads, num_blocks, block_size, head_dim)
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        num_tokens = hidden.shape[0]
        q = self.q_proj(hidden).view(num_tokens, self.num_heads, self.head_dim)
        k = self.k_proj(hidden).view(num_tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(hidden).view(num_tokens, self.num_kv_heads, self.head_dim)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        out = paged_attention(q, k, v, kv_layer, metadata, scale=self.scale)
        return self.o_proj(out.reshape(num_tokens, self.num_heads * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, m = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(h, m, bias=False)
        self.up_proj = Linear(h, m, bias=False)
        self.down_proj = Linear(m, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, hidden, cos, sin, kv_layer, metadata):  # type: ignore[no-untyped-def]
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), cos, sin, kv_layer, metadata)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig, max_positions: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, max_positions, config.rope_theta)


class LlamaForCausalLM(nn.Module):
    """state_dict() keys match HF's LlamaForCausalLM (model.layers.N.self_attn.q_proj.weight...)."""

    def __init__(self, config: ModelConfig, *, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.max_positions = max_positions or config.max_position_embeddings
        self.model = LlamaModel(config, self.max_positions)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,  # (T,)
        kv_layers: list[torch.Tensor],  # per layer (2, kv_heads, num_blocks, block_size, head_dim)
        metadata: AttentionMetadata,
    ) -> torch.Tensor:
        """Final-normed hidden states (T, hidden); writes each token's K/V into kv_layers."""
        hidden = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary(metadata.positions, hidden.dtype)
        for layer, kv_layer in zip(self.model.layers, kv_layers, strict=True):
            hidden = layer(hidden, cos, sin, kv_layer, metadata)
        return self.model.norm(hidden)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()  # (rows, vocab)

    def set_batch_invariant(self, enabled: bool) -> None:
        """Row-padded products in every linear layer (attention is told by its metadata)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.row_padded = enabled


def build_random_model(
    config: ModelConfig,
    *,
    seed: int,
    device: torch.device,
    dtype: torch.dtype,
    max_positions: int | None = None,
) -> LlamaForCausalLM:
    """Seeded random weights, drawn on the CPU in fp32 in a fixed order so a seed gives the same
    weights on every device and run; each tensor moves to the device as soon as it is drawn."""
    with torch.device("meta"):
        model = LlamaForCausalLM(config, max_positions=max_positions)
    model.to_empty(device=device)
    if config.tie_word_embeddings:  # to_empty() gives each module its own new tensor
        model.lm_head.weight = model.model.embed_tokens.weight
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                value = torch.ones(param.shape)
            else:
                value = torch.empty(param.shape).normal_(0.0, config.init_std, generator=generator)
            param.copy_(value)
        rotary = RotaryEmbedding(config.head_dim, model.max_positions, config.rope_theta)
        model.model.rotary = rotary.to(device)
    return model.to(dtype=dtype).eval()
