"""Model config presets, seeded weights, and the paged forward against a dense reference."""

from __future__ import annotations

import pytest
import torch

from reference_server.attention import build_attention_metadata
from reference_server.model import build_random_model
from reference_server.model_config import MODEL_PRESETS, ModelConfig, get_preset


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread():
    # On a shared, oversubscribed CPU box torch's two OpenMP threads stall at every barrier
    # (measured: this module ran 2.6x slower and burned 2.4x the CPU); restored afterwards.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


SMALL = ModelConfig(
    vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


def _build(seed: int, config: ModelConfig = SMALL):
    return build_random_model(config, seed=seed, device=torch.device("cpu"), dtype=torch.float32)


def test_same_seed_gives_identical_weights_and_other_seeds_differ() -> None:
    a, b, c = _build(3).state_dict(), _build(3).state_dict(), _build(4).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not torch.equal(
        a["model.layers.0.self_attn.q_proj.weight"], c["model.layers.0.self_attn.q_proj.weight"]
    )


def test_parameter_names_follow_hugging_face_llama() -> None:
    names = set(_build(0).state_dict())
    assert "model.embed_tokens.weight" in names
    assert "model.layers.1.mlp.gate_proj.weight" in names
    assert "model.layers.0.post_attention_layernorm.weight" in names
    assert "model.norm.weight" in names and "lm_head.weight" in names


@pytest.mark.parametrize(("name", "low", "high"), [("100m", 85e6, 115e6), ("1b", 0.85e9, 1.15e9)])
def test_large_presets_have_their_nominal_size(name: str, low: float, high: float) -> None:
    assert low <= get_preset(name).num_parameters() <= high


def test_num_parameters_counts_the_built_model() -> None:
    model = _build(0, MODEL_PRESETS["tiny"])
    assert MODEL_PRESETS["tiny"].num_parameters() == sum(p.numel() for p in model.parameters())


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="tiny"):
        get_preset("huge")


@pytest.mark.parametrize(
    "changes",
    [{"hidden_size": 30}, {"num_kv_heads": 3}, {"num_layers": 0}, {"rms_norm_eps": -1.0}],
)
def test_invalid_config_raises(changes: dict) -> None:
    fields = SMALL.to_dict() | changes
    with pytest.raises(ValueError):
        ModelConfig(**fields)


def _dense_reference_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Textbook Llama forward with dense causal SDPA, no cache: the paged path must agree."""
    cfg = model.config
    group = cfg.num_heads // cfg.num_kv_heads
    positions = torch.arange(ids.shape[0])
    cos, sin = model.model.rotary(positions, torch.float32)
    rot = lambda x: torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), -1)  # noqa: E731
    h = model.model.embed_tokens(ids)
    for layer in model.model.layers:
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        q = attn.q_proj(x).view(-1, cfg.num_heads, cfg.head_dim)
        k = attn.k_proj(x).view(-1, cfg.num_kv_heads, cfg.head_dim)
        v = attn.v_proj(x).view(-1, cfg.num_kv_heads, cfg.head_dim)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True
        ).transpose(0, 1)
        h = h + attn.o_proj(out.reshape(ids.shape[0], -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.compute_logits(model.model.norm(h))


def test_paged_forward_matches_a_dense_causal_forward() -> None:
    model = _build(1)
    ids = torch.randint(0, SMALL.vocab_size, (23,), generator=torch.Generator().manual_seed(0))
    block_size = 4
    num_blocks = 8
    kv = torch.zeros(
        SMALL.num_layers, 2, SMALL.num_kv_heads, num_blocks, block_size, SMALL.head_dim
    )
    table = torch.tensor([[5, 2, 7, 0, 1, 3]])  # scattered physical blocks
    metadata = build_attention_metadata(
        query_lens=[23],
        context_lens=[23],
        block_tables=table,
        block_size=block_size,
    )
    with torch.inference_mode():
        paged = model.compute_logits(model(ids, list(kv.unbind(0)), metadata))
        dense = _dense_reference_logits(model, ids)
    assert torch.allclose(paged, dense, atol=1e-5)
