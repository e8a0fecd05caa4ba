"""ModelRunner: batch-independent and preemption-proof outputs, special-token masking, embed,
and clear errors."""

from __future__ import annotations

import pytest
import torch

from reference_server.errors import ConfigError
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


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(model="tiny", device="cpu", seed=0, block_size=4, max_model_len=512)


class _Blocks:
    """A trivial block allocator for the tests (the real one is the engine's BlockManager)."""

    def __init__(self, num_blocks: int) -> None:
        self.free = list(range(num_blocks - 1, -1, -1))

    def grow(self, seq: Sequence, num_tokens: int, block_size: int) -> None:
        while len(seq.block_table) * block_size < num_tokens:
            seq.block_table.append(self.free.pop())

    def release(self, seq: Sequence) -> None:
        self.free.extend(seq.block_table)
        seq.block_table = []


def _seq(name: str, prompt: list[int], **params) -> Sequence:
    params.setdefault("temperature", 0.0)
    params.setdefault("seed", 7)
    return Sequence(
        name, list(prompt), SamplingParams(**params), priority="interactive", arrival_time=0.0
    )


def _prompt(length: int, salt: int) -> list[int]:
    return [(salt * 31 + i * 7) % 256 for i in range(length)]


def _generate(
    runner: ModelRunner,
    seqs: list[Sequence],
    num_tokens: int,
    *,
    chunk_tokens: int = 1_000_000,
    preempt_after: dict[str, int] | None = None,
) -> dict[str, list[int]]:
    """Drives the runner like a continuous-batching engine: every step each sequence
    contributes a prefill chunk (capped at chunk_tokens) or a decode, all in one execute()."""
    blocks = _Blocks(runner.num_kv_blocks)
    preempt_after = dict(preempt_after or {})
    active = list(seqs)
    for _ in range(10_000):
        if not active:
            break
        chunks = []
        for seq in active:
            count = min(seq.num_tokens - seq.num_computed_tokens, chunk_tokens)
            blocks.grow(seq, seq.num_computed_tokens + count, runner.block_size)
            sample = seq.num_computed_tokens + count == seq.num_tokens
            chunks.append(ScheduledChunk(seq, count, sample))
        tokens = runner.execute(chunks)
        for chunk, token in zip(chunks, tokens, strict=True):
            seq = chunk.seq
            seq.num_computed_tokens += chunk.num_new_tokens
            assert (token is not None) == chunk.sample
            if token is not None:
                seq.output_token_ids.append(token)
            if preempt_after.get(seq.request_id) == len(seq.output_token_ids):
                # Preemption by recompute: blocks freed, the whole sequence re-prefilled later.
                del preempt_after[seq.request_id]
                blocks.release(seq)
                seq.num_computed_tokens = 0
        active = [s for s in active if len(s.output_token_ids) < num_tokens]
    return {s.request_id: list(s.output_token_ids) for s in seqs}


def test_greedy_output_is_identical_alone_and_in_a_mixed_batch(runner: ModelRunner) -> None:
    alone = _generate(runner, [_seq("target", _prompt(37, 1))], 12)
    others = [_seq(f"o{i}", _prompt(5 + 23 * i, i + 2)) for i in range(5)]
    # The target is mid-decode while others are still prefilling in chunks, and vice versa.
    batched = _generate(
        runner, [*others[:2], _seq("target", _prompt(37, 1)), *others[2:]], 12, chunk_tokens=16
    )
    assert batched["target"] == alone["target"]
    assert len(set(map(tuple, batched.values()))) > 1  # the others really are other sequences


def test_greedy_output_survives_preemption_and_recompute(runner: ModelRunner) -> None:
    plain = _generate(runner, [_seq("a", _prompt(30, 3)), _seq("b", _prompt(9, 4))], 10)
    preempted = _generate(
        runner,
        [_seq("a", _prompt(30, 3)), _seq("b", _prompt(9, 4))],
        10,
        preempt_after={"a": 4, "b": 7},
    )
    assert preempted == plain


def test_seeded_sampling_is_batch_independent_and_preemption_proof(runner: ModelRunner) -> None:
    settings = {"temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 2024}
    alone = _generate(runner, [_seq("s", _prompt(20, 5), **settings)], 10)
    others = [_seq(f"o{i}", _prompt(11 + i, 9 + i), temperature=1.3, seed=i) for i in range(3)]
    batched = _generate(
        runner,
        [others[0], _seq("s", _prompt(20, 5), **settings), *others[1:]],
        10,
        chunk_tokens=8,
        preempt_after={"s": 5},
    )
    assert batched["s"] == alone["s"]
    other_seed = _generate(runner, [_seq("s", _prompt(20, 5), **(settings | {"seed": 1}))], 10)
    assert other_seed["s"] != alone["s"]


def test_chunked_prefill_gives_the_same_tokens_as_one_shot_prefill(runner: ModelRunner) -> None:
    one_shot = _generate(runner, [_seq("c", _prompt(50, 8))], 6)
    for chunk_tokens in (1, 7, 16):
        assert (
            _generate(runner, [_seq("c", _prompt(50, 8))], 6, chunk_tokens=chunk_tokens) == one_shot
        )


def test_synthetic_model_never_samples_special_tokens(runner: ModelRunner) -> None:
    seqs = [_seq(f"h{i}", [i % 256], temperature=50.0, seed=i) for i in range(300)]
    outputs = _generate(runner, seqs, 2)
    assert max(t for tokens in outputs.values() for t in tokens) < 256


def test_special_stop_token_is_allowed_when_the_request_asks_for_it(runner: ModelRunner) -> None:
    eos = runner.eos_token_id
    seqs = [
        _seq(f"e{i}", [i % 256], temperature=50.0, seed=i, stop_token_ids=(eos,))
        for i in range(600)
    ]
    tokens = [t for out in _generate(runner, seqs, 1).values() for t in out]
    assert eos in tokens
    assert max(t for t in tokens if t != eos) < 256


def test_non_sampling_chunks_return_none_and_fill_the_cache(runner: ModelRunner) -> None:
    seq = _seq("p", _prompt(10, 1))
    seq.block_table = [0, 1, 2]
    assert runner.execute([ScheduledChunk(seq, 6, False)]) == [None]


def test_embeddings_are_unit_norm_batch_independent_and_leave_the_cache(
    runner: ModelRunner,
) -> None:
    before = runner.kv_cache.kv.clone()
    inputs = [_prompt(5, 1), _prompt(40, 2), _prompt(1, 3)]
    batched = torch.tensor(runner.embed(inputs))
    assert torch.allclose(batched.norm(dim=-1), torch.ones(3), atol=1e-5)
    alone = torch.tensor(runner.embed([inputs[1]]))
    assert torch.allclose(alone[0], batched[1], atol=1e-5)
    assert not torch.allclose(batched[0], batched[1])
    assert torch.equal(runner.kv_cache.kv, before)


def test_memory_stats_are_zero_device_bytes_on_cpu(runner: ModelRunner) -> None:
    stats = runner.memory_stats()
    assert stats["device_memory_allocated_bytes"] == 0
    assert stats["device_memory_peak_bytes"] == 0
    assert stats["kv_cache_bytes"] == runner.kv_cache.kv.numel() * 4


def test_kv_pool_is_sized_from_the_byte_budget() -> None:
    small = ModelRunner(device="cpu", block_size=16, kv_cache_memory_bytes=1 << 20)
    cfg = small.model_config
    per_block = 16 * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    assert small.num_kv_blocks == (1 << 20) // per_block
    assert small.kv_cache.kv.shape == (
        cfg.num_layers,
        2,
        cfg.num_kv_heads,
        small.num_kv_blocks,
        16,
        cfg.head_dim,
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": "nope"}, "model"),
        ({"device": "tpu"}, "device"),
        ({"dtype": "int8"}, "dtype"),
        ({"block_size": 0}, "block_size"),
        ({"kv_cache_memory_bytes": 10}, "kv_cache_memory_bytes"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"max_model_len": 10**6}, "max_model_len"),
    ],
)
def test_bad_settings_raise_config_error_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        ModelRunner(**({"device": "cpu"} | kwargs))
    assert info.value.field == field


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_requested_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="no CUDA device") as info:
        ModelRunner(device="cuda")
    assert info.value.field == "device"


def test_malformed_chunks_are_rejected_before_the_forward(runner: ModelRunner) -> None:
    seq = _seq("x", _prompt(10, 1))
    seq.block_table = [0]  # 4 slots for 10 tokens
    with pytest.raises(ValueError, match="block table too short"):
        runner.execute([ScheduledChunk(seq, 10, True)])
    seq.block_table = [0, 1, 2]
    with pytest.raises(ValueError, match="must end at"):
        runner.execute([ScheduledChunk(seq, 5, True)])
    seq.block_table = [0, 1, runner.num_kv_blocks]
    with pytest.raises(ValueError, match="block ids"):
        runner.execute([ScheduledChunk(seq, 10, True)])
    bad = _seq("y", [1, 2, 999])
    bad.block_table = [0]
    with pytest.raises(ValueError, match="token ids"):
        runner.execute([ScheduledChunk(bad, 3, True)])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_runner_uses_bf16_and_generates_alone_and_batched() -> None:
    gpu = ModelRunner(device="cuda", block_size=16, kv_cache_memory_bytes=64 << 20)
    assert gpu.device == "cuda" and gpu.kv_cache.kv.dtype == torch.bfloat16
    outputs = _generate(gpu, [_seq(f"g{i}", _prompt(20 + i, i)) for i in range(4)], 8)
    assert all(len(tokens) == 8 and max(tokens) < 256 for tokens in outputs.values())
    assert gpu.memory_stats()["device_memory_allocated_bytes"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_step_that_samples_nothing_returns_only_when_the_device_is_done() -> None:
    # Step timing (forward_seconds) is taken around execute(): it must include the device's
    # work even when no token is read back. A ~50 ms device sleep queued first makes a return
    # before the device is done visible on any GPU, however fast its own kernels are.
    gpu = ModelRunner(device="cuda", block_size=16, kv_cache_memory_bytes=64 << 20)
    seq = _seq("p", _prompt(40, 3))
    seq.block_table = [0, 1, 2]
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)  # GPU clock cycles, on the current stream
    assert gpu.execute([ScheduledChunk(seq, 32, False)]) == [None]
    assert torch.cuda.current_stream().query(), "execute returned with device work pending"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_auto_device_without_cuda_is_cpu_in_fp32() -> None:
    auto = ModelRunner(device="auto", kv_cache_memory_bytes=1 << 20)
    assert auto.device == "cpu"
    assert auto.kv_cache.kv.dtype == torch.float32
    assert next(auto.model.parameters()).dtype == torch.float32


def test_num_threads_is_applied_only_when_given() -> None:
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        ModelRunner(device="cpu", kv_cache_memory_bytes=1 << 20)
        assert torch.get_num_threads() == 2
        ModelRunner(device="cpu", kv_cache_memory_bytes=1 << 20, num_threads=1)
        assert torch.get_num_threads() == 1
        with pytest.raises(ConfigError) as info:
            ModelRunner(device="cpu", num_threads=0)
        assert info.value.field == "num_threads"
    finally:
        torch.set_num_threads(previous)


def test_a_block_count_override_sizes_the_pool_in_blocks_whatever_the_model():
    tiny = ModelRunner(model="tiny", device="cpu", block_size=16, num_kv_blocks_override=16)
    small = ModelRunner(model="small", device="cpu", block_size=16, num_kv_blocks_override=16)
    assert tiny.num_kv_blocks == small.num_kv_blocks == 16
    by_bytes = ModelRunner(
        model="small", device="cpu", block_size=16, kv_cache_memory_bytes=256 << 10
    )
    assert by_bytes.num_kv_blocks < 16  # the same bytes hold fewer blocks of a wider model
