"""The model runner: the only part of the engine that touches tensors. It builds the model
(seeded preset or loaded checkpoint), sizes the paged KV pool, and runs one forward per engine
step over every scheduled chunk (prefill chunks and decodes mixed), then samples.

It does not decide what runs (the scheduler does), allocate blocks (the block manager does), or
advance sequences (the engine appends sampled tokens and num_computed_tokens afterwards).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence as AbcSequence
from typing import TYPE_CHECKING

import psutil
import torch

from reference_server.attention import build_attention_metadata
from reference_server.batch_invariant import ROW_QUANTUM
from reference_server.checkpoint import load_checkpoint
from reference_server.errors import ConfigError
from reference_server.kv_cache import DEFAULT_CPU_KV_CACHE_BYTES, KVCache, num_blocks_for_budget
from reference_server.logits_mask import AllowedTokenMask
from reference_server.logits_processors import apply_logits_processors
from reference_server.model import build_random_model
from reference_server.model_config import get_preset
from reference_server.sampler import SamplingTensors, sample
from reference_server.step_memory import check_step_memory, step_activation_bytes
from reference_server.tokenizer import ByteTokenizer

if TYPE_CHECKING:
    from reference_server.sequence import ScheduledChunk, Sequence

__all__ = ["ModelRunner", "auto_num_threads", "resolve_device", "resolve_dtype"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_device(device: str) -> str:
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError("device", f"must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ConfigError(
            "device", f"'cuda' requested but no CUDA device is usable (torch is {build})"
        )
    return device


def resolve_dtype(dtype: str | None, device: str) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise ConfigError("dtype", f"must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def auto_num_threads(device: str) -> int | None:
    """EngineConfig.torch_num_threads=None: on CPU all cores but one (1..8), so the HTTP loop and
    a load generator keep a core and OpenMP barriers do not stall on a busy box; on CUDA None
    (torch's own setting: the CPU threads only launch kernels)."""
    if resolve_device(device) != "cpu":
        return None
    return max(1, min(8, (os.cpu_count() or 1) - 1))


def _positive_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(field, f"must be a positive integer, got {value!r}")
    return value


def _shared_generator_seed(seqs: AbcSequence[Sequence]) -> int | None:
    """The `shared_sampler_seed` preset's one generator per step, seeded from the step's first
    random row (its seed and position): a seeded row alone draws the same noise every run, but
    in company its draws depend on who is sampled before it."""
    for seq in seqs:
        params = seq.sampling_params
        if params.temperature > 0:
            seed = 0 if params.seed is None else params.seed
            return (seed * 1_000_003 + len(seq.output_token_ids)) % (1 << 63)
    return None


class ModelRunner:
    """One model, one KV pool, one device. execute() is called from a single engine thread."""

    # A failure preset (BatchingConfig.shared_sampler_seed), set by the engine.
    shared_sampler_seed: bool = False

    def __init__(
        self,
        *,
        model: str = "tiny",
        model_path: str | None = None,
        device: str = "auto",
        dtype: str | None = None,
        seed: int = 0,
        block_size: int = 16,
        kv_cache_memory_bytes: int | None = None,
        num_kv_blocks_override: int | None = None,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int = 2048,
        max_num_batched_tokens: int = 2048,
        num_threads: int | None = None,
        batch_invariant: bool = True,
    ) -> None:
        """num_threads: None leaves torch's intra-op thread count alone; an int sets it for the
        process (the server owns its process). On a busy 2-core box one thread measured far
        faster than the default two, whose OpenMP barriers stall (docs/model.md)."""
        self.block_size = _positive_int("block_size", block_size)
        self.max_model_len = _positive_int("max_model_len", max_model_len)
        self.max_num_batched_tokens = _positive_int(
            "max_num_batched_tokens", max_num_batched_tokens
        )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError("seed", f"must be an integer, got {seed!r}")
        if kv_cache_memory_bytes is not None:
            _positive_int("kv_cache_memory_bytes", kv_cache_memory_bytes)
        if not isinstance(gpu_memory_utilization, (int, float)) or not (
            0 < gpu_memory_utilization <= 1
        ):
            raise ConfigError("gpu_memory_utilization", "must be in (0, 1]")
        if num_threads is not None:
            torch.set_num_threads(_positive_int("num_threads", num_threads))
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        torch_device = torch.device(self.device)
        self.tokenizer = ByteTokenizer()

        if model_path is not None:
            loaded = load_checkpoint(
                model_path, device=torch_device, dtype=self.dtype, max_positions=max_model_len
            )
            self.model, self.model_config = loaded.model, loaded.config
            self.model_name = loaded.name
            self.is_synthetic = False
            eos = loaded.eos_token_id
            if eos is None and self.tokenizer.eos_token_id < loaded.config.vocab_size:
                eos = self.tokenizer.eos_token_id
            if eos is None:
                raise ConfigError("model_path", "config.json names no eos_token_id")
            self.eos_token_id = eos
        else:
            try:
                self.model_config = get_preset(model)
            except ValueError as exc:
                raise ConfigError("model", str(exc)) from None
            self._check_max_model_len()
            self.model = build_random_model(
                self.model_config,
                seed=seed,
                device=torch_device,
                dtype=self.dtype,
                max_positions=max_model_len,
            )
            self.model_name = model
            self.is_synthetic = True
            self.eos_token_id = self.tokenizer.eos_token_id
        self._check_max_model_len()
        self.vocab_size = self.model_config.vocab_size
        # Batch invariance (batch_invariant.py): row-padded products, and attention query rows
        # padded so that group * rows is a multiple of the same quantum.
        self.batch_invariant = bool(batch_invariant)
        self.model.set_batch_invariant(self.batch_invariant)
        group = self.model_config.num_heads // self.model_config.num_kv_heads
        self._query_row_quantum = (
            ROW_QUANTUM // math.gcd(group, ROW_QUANTUM) if self.batch_invariant else None
        )
        # Outputs stay valid UTF-8 (docs/model.md). Random weights would emit EOS at random, so
        # a synthetic generation runs to max_tokens unless its stop_token_ids name EOS.
        self.allowed_tokens = AllowedTokenMask(
            vocab_size=self.vocab_size,
            eos_token_id=self.eos_token_id,
            allow_eos=not self.is_synthetic,
            device=torch_device,
        )

        if self.device == "cpu":  # on CUDA the KV budget below leaves the step its room
            try:
                self.check_step_memory(self.max_num_batched_tokens)
            except ConfigError as exc:
                raise exc.with_prefix("batching") from None  # the flag's name
        if num_kv_blocks_override is not None:
            num_blocks = _positive_int("num_gpu_blocks_override", num_kv_blocks_override)
        else:
            budget_bytes = self._kv_budget_bytes(kv_cache_memory_bytes, gpu_memory_utilization)
            try:
                num_blocks = num_blocks_for_budget(
                    self.model_config,
                    block_size=self.block_size,
                    dtype=self.dtype,
                    budget_bytes=budget_bytes,
                )
            except ValueError as exc:
                raise ConfigError("kv_cache_memory_bytes", str(exc)) from None
        self.kv_cache = KVCache(
            self.model_config,
            num_blocks=num_blocks,
            block_size=self.block_size,
            device=torch_device,
            dtype=self.dtype,
        )
        self.num_kv_blocks = num_blocks
        self._model_weights_bytes = sum(
            p.numel() * p.element_size() for p in self.model.parameters()
        )

    def _check_max_model_len(self) -> None:
        if self.max_model_len > self.model_config.max_position_embeddings:
            raise ConfigError(
                "max_model_len",
                f"{self.max_model_len} exceeds the model's max_position_embeddings "
                f"({self.model_config.max_position_embeddings})",
            )

    def _kv_budget_bytes(self, explicit_bytes: int | None, utilization: float) -> int:
        if explicit_bytes is not None:
            return explicit_bytes
        if self.device == "cpu":
            return DEFAULT_CPU_KV_CACHE_BYTES
        # The model was drawn in fp32 on the device and then cast: the caching allocator still
        # holds the fp32 copies' memory, which the driver counts as used but the pool may take.
        torch.cuda.empty_cache()
        free_bytes, _total_bytes = torch.cuda.mem_get_info()
        # Leave room for one full step's activations (MLP, logits, attention scores).
        activation_bytes = step_activation_bytes(
            self.model_config, tokens=self.max_num_batched_tokens, max_model_len=self.max_model_len
        )
        return max(int(free_bytes * utilization) - activation_bytes, 0)

    def check_step_memory(self, max_num_batched_tokens: int) -> None:
        """ConfigError when a step of this many tokens would not fit the memory free now."""
        if self.device == "cuda":
            free_bytes = torch.cuda.mem_get_info()[0]
        else:
            free_bytes = psutil.virtual_memory().available
        check_step_memory(
            self.model_config,
            device=self.device,
            max_model_len=self.max_model_len,
            tokens=max_num_batched_tokens,
            reserved_tokens=self.max_num_batched_tokens,
            free_bytes=free_bytes,
        )

    @torch.inference_mode()
    def execute(self, chunks: AbcSequence[ScheduledChunk]) -> list[int | None]:
        """One forward over all chunks; returns one token per chunk (None where not sampling)."""
        if not chunks:
            return []
        token_ids: list[int] = []
        query_lens: list[int] = []
        context_lens: list[int] = []
        tables: list[list[int]] = []
        sample_rows: list[int] = []
        sample_chunks: list[int] = []
        block_size = self.block_size
        num_tokens = 0
        for index, chunk in enumerate(chunks):
            seq = chunk.seq
            start, count = seq.num_computed_tokens, chunk.num_new_tokens
            end = start + count
            self._check_chunk(seq, start, count, end)
            prompt = seq.prompt_token_ids
            num_prompt = len(prompt)
            if end <= num_prompt:
                token_ids.extend(prompt[start:end])
            elif start >= num_prompt:
                token_ids.extend(seq.output_token_ids[start - num_prompt : end - num_prompt])
            else:
                token_ids.extend(prompt[start:])
                token_ids.extend(seq.output_token_ids[: end - num_prompt])
            query_lens.append(count)
            context_lens.append(end)
            # Only the blocks this chunk reaches; the rest of a preallocated table is not read.
            tables.append(seq.block_table[: (end + block_size - 1) // block_size])
            num_tokens += count
            if chunk.sample:
                if end != seq.num_tokens:
                    raise ValueError(
                        f"request {seq.request_id}: a sampling chunk must end at the sequence's "
                        f"last token ({seq.num_tokens}), this one ends at {end}"
                    )
                sample_rows.append(num_tokens - 1)
                sample_chunks.append(index)

        max_blocks = max(len(t) for t in tables)
        flat_blocks = [b for t in tables for b in t]
        if min(flat_blocks) < 0 or max(flat_blocks) >= self.num_kv_blocks:
            raise ValueError(f"block ids must lie in [0, {self.num_kv_blocks})")
        input_ids = torch.tensor(token_ids, dtype=torch.int64)
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        device = self.kv_cache.kv.device
        block_tables = torch.tensor(
            [t + [0] * (max_blocks - len(t)) for t in tables], dtype=torch.int64
        )
        metadata = build_attention_metadata(
            query_lens=query_lens,
            context_lens=context_lens,
            block_tables=block_tables.to(device),
            block_size=block_size,
            query_row_quantum=self._query_row_quantum,
        )
        hidden = self.model(input_ids.to(device), self.kv_cache.kv_layers, metadata)
        results: list[int | None] = [None] * len(chunks)
        if not sample_rows:
            # Nothing is read back, so on CUDA nothing has waited for the device yet: the step's
            # forward time would be the kernels' launch only, and their run charged to the next
            # step (a step of prefill chunks only: a long prompt alone, the static policy).
            if hidden.is_cuda:
                torch.cuda.synchronize(hidden.device)
            return results
        rows = torch.tensor(sample_rows, dtype=torch.int64, device=device)
        logits = self.model.compute_logits(hidden[rows])  # (rows, vocab) float32
        sampled_seqs = [chunks[i].seq for i in sample_chunks]
        self.allowed_tokens.apply(logits, sampled_seqs)
        apply_logits_processors(logits, sampled_seqs)
        params = [seq.sampling_params for seq in sampled_seqs]
        tensors = SamplingTensors.from_lists(
            temperature=[float(p.temperature) for p in params],
            top_p=[float(p.top_p) for p in params],
            top_k=[p.top_k for p in params],
            # The engine always assigns a seed; 0 keeps a hand-built Sequence deterministic too.
            seed=[0 if p.seed is None else p.seed for p in params],
            output_position=[len(seq.output_token_ids) for seq in sampled_seqs],
            device=device,
        )
        shared_seed = _shared_generator_seed(sampled_seqs) if self.shared_sampler_seed else None
        tokens = sample(logits, tensors, shared_generator_seed=shared_seed)
        for index, token in zip(sample_chunks, tokens.tolist(), strict=True):
            results[index] = token
        return results

    def _check_chunk(self, seq: Sequence, start: int, count: int, end: int) -> None:
        request = seq.request_id
        if count <= 0:
            raise ValueError(f"request {request}: num_new_tokens must be positive, got {count}")
        if end > seq.num_tokens:
            raise ValueError(f"request {request}: chunk ends at {end} past its tokens")
        if end > self.max_model_len:
            raise ValueError(f"request {request}: position {end} exceeds max_model_len")
        if len(seq.block_table) * self.block_size < end:
            raise ValueError(f"request {request}: block table too short for {end} tokens")

    @torch.inference_mode()
    def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        """Mean-pooled, L2-normalised final hidden states; one forward; leaves the KV pool alone."""
        if not token_id_lists:
            return []
        lens = [len(ids) for ids in token_id_lists]
        if min(lens) == 0:
            raise ValueError("every input to embed() needs at least one token")
        if max(lens) > self.max_model_len:
            raise ValueError(f"an input to embed() exceeds max_model_len ({self.max_model_len})")
        flat = [t for ids in token_id_lists for t in ids]
        input_ids = torch.tensor(flat, dtype=torch.int64)
        if int(input_ids.min()) < 0 or int(input_ids.max()) >= self.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.vocab_size})")
        device = self.kv_cache.kv.device
        bs = self.block_size
        blocks_per_input = [(n + bs - 1) // bs for n in lens]
        max_blocks = max(blocks_per_input)
        tables, next_block = [], 0
        for count in blocks_per_input:
            table = list(range(next_block, next_block + count))
            tables.append(table + [0] * (max_blocks - count))
            next_block += count
        config = self.model_config
        # One scratch layer shared by all layers: each layer writes its K/V and reads them back
        # before the next layer overwrites them.
        scratch = torch.zeros(
            (2, config.num_kv_heads, next_block, bs, config.head_dim),
            device=device,
            dtype=self.dtype,
        )  # (2, kv_heads, num_blocks, block_size, head_dim)
        metadata = build_attention_metadata(
            query_lens=lens,
            context_lens=lens,
            block_tables=torch.tensor(tables, dtype=torch.int64, device=device),
            block_size=bs,
        )
        hidden = self.model(input_ids.to(device), [scratch] * config.num_layers, metadata)
        lens_tensor = torch.tensor(lens, dtype=torch.int64, device=device)
        owner = torch.repeat_interleave(torch.arange(len(lens), device=device), lens_tensor)
        pooled = torch.zeros(len(lens), config.hidden_size, device=device, dtype=torch.float32)
        pooled.index_add_(0, owner, hidden.float())
        pooled = pooled / lens_tensor[:, None].float()
        return torch.nn.functional.normalize(pooled, dim=-1).tolist()

    def memory_stats(self) -> dict[str, int]:
        stats = {
            "device_memory_allocated_bytes": 0,
            "device_memory_reserved_bytes": 0,
            "device_memory_peak_bytes": 0,
            "kv_cache_bytes": self.kv_cache.nbytes,
            "model_weights_bytes": self._model_weights_bytes,
        }
        if self.device == "cuda":
            stats["device_memory_allocated_bytes"] = torch.cuda.memory_allocated()
            stats["device_memory_reserved_bytes"] = torch.cuda.memory_reserved()
            stats["device_memory_peak_bytes"] = torch.cuda.max_memory_allocated()
        return stats
