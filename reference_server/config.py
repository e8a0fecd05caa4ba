"""The engine's configuration: EngineConfig (fixed at start) and BatchingConfig (live-changeable),
with per-priority-class limits (ClassConfig).

It validates values and names the offending field (ConfigError.field is the dotted path); it does
not know how the scheduler applies them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from reference_server.errors import ConfigError

__all__ = [
    "ITERATION_POLICIES",
    "POLICIES",
    "SAMPLING_ALIGNMENTS",
    "BatchingConfig",
    "ClassConfig",
    "EngineConfig",
    "integer_problem",
]

POLICIES: tuple[str, ...] = ("continuous", "dynamic", "static", "slo")
# Policies that admit per iteration (no batch membership): slo is continuous with a step budget.
ITERATION_POLICIES: tuple[str, ...] = ("continuous", "slo")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
# "mixed": one step serves rows with any sampling parameters (each sampled with its own);
# "strict": a step serves only rows of one sampling signature (a failure preset).
SAMPLING_ALIGNMENTS: tuple[str, ...] = ("mixed", "strict")
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")


def integer_problem(value: Any, shown: str) -> str:
    """Why `value` (from JSON) is not an integer; `shown` is how to name what was given."""
    if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
        # orjson reads an integer past 64 bits as a float: the body held a whole number.
        return f"must be an integer of at most 64 bits, got {value:.6g}"
    return f"must be an integer, got {shown}"


def _int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, integer_problem(value, repr(value)))
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")


def _number(name: str, value: Any, *, minimum: float, maximum: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, f"must be a finite number, got {value!r}")
    if not minimum <= value <= maximum:
        raise ConfigError(name, f"must be in [{minimum}, {maximum}], got {value}")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}, got {value!r}")


def _optional_str(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(name, f"must be a non-empty string or null, got {value!r}")


def _check_keys(cls: type, data: Any) -> None:
    if not isinstance(data, dict):
        raise ConfigError("<root>", f"must be a mapping, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in known:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(known))})")


@dataclass(frozen=True, kw_only=True)
class ClassConfig:
    """Limits of one priority class's queue."""

    max_waiting: int = 256  # queued requests beyond this are refused ("queue_full")
    max_batch_size: int = 16  # dynamic / static: members of one batch (capped by max_num_seqs)
    max_wait_ms: float = 20.0  # dynamic: the oldest request waits at most this long
    dispatch_threshold: int | None = None  # dynamic adaptive: dispatch at once at this length

    def __post_init__(self) -> None:
        _int("max_waiting", self.max_waiting, minimum=0)
        _int("max_batch_size", self.max_batch_size, minimum=1)
        _number("max_wait_ms", self.max_wait_ms, minimum=0.0, maximum=600_000.0)
        if self.dispatch_threshold is not None:
            _int("dispatch_threshold", self.dispatch_threshold, minimum=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassConfig:
        _check_keys(cls, data)
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _batch_class_default() -> ClassConfig:
    return ClassConfig(max_waiting=1024, max_batch_size=32, max_wait_ms=50.0)


_CLASS_DEFAULTS = {"interactive": ClassConfig, "batch": _batch_class_default}


@dataclass(frozen=True, kw_only=True)
class BatchingConfig:
    """The live-changeable scheduling settings (PUT /admin/batching)."""

    policy: str = "continuous"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_prefill_chunk_tokens: int = 512
    # Anti-starvation: once the batch class has had waiting requests for this many consecutive
    # steps without one being admitted, its head is admitted (or its batch dispatched) before
    # interactive requests, and admission holds until it fits.
    max_starvation_steps: int = 64
    # True puts both classes into one FIFO (interactive's window and batch size apply): a
    # deliberately bad setting used to show head-of-line blocking of interactive traffic.
    shared_queue: bool = False
    # The class Batch API jobs' lines run in. "batch" (default) keeps offline jobs behind chat;
    # "interactive" sends them through the chat queue with the chat settings — the mistake of
    # running an offline job on the online path, kept settable so a gate can show it.
    batch_api_priority: str = "batch"
    # Work-conserving room for offline work (continuous policy, separate queues): while the
    # interactive class is active — a request running or waiting, or one that arrived within
    # interactive_active_ms — at most this many batch-class sequences run (None: no cap); with
    # no chat the batch class may fill every slot. On hardware whose step time grows with the
    # batch (a CPU), 64 job rows beside a chat request make its every step several times longer;
    # the cap bounds that. Running sequences are never preempted for it: admissions wait.
    # 4: measured on the CPU tiny model, chat TTFT p90 during a job 1.2x of before it (8: 1.3-1.5x,
    # no cap: 4.4x); a GPU, whose step time barely grows with the batch, can take far more.
    batch_max_running_with_interactive: int | None = 4
    interactive_active_ms: float = 500.0
    # The slo policy: continuous batching whose per-step token budget is sized, each step, so
    # that the predicted step time (the time between a running request's tokens) stays under
    # slo_target_ms, from a cost model fitted online to the engine's own steps
    # (reference_server/step_cost.py). A step always gets at least slo_min_prefill_tokens of
    # prefill when a prompt is waiting, so a long prompt's wait stays bounded whatever the target.
    slo_target_ms: float = 50.0
    slo_min_prefill_tokens: int = 32
    # Automatic prefix caching (vLLM's, on by default as there): a request's leading full KV
    # blocks already computed for an earlier one are shared instead of prefilled again. Off live:
    # the cache is dropped at once (its free blocks become plain free blocks); on again: it starts
    # empty.
    enable_prefix_caching: bool = True
    # Two deliberate failure presets of batch alignment (docs/engine.md, "Mixed batches"):
    # "strict" makes each step serve only the rows of one sampling signature (temperature, top_p,
    # top_k, seed given or not, penalties, logit_bias, stop, thinking), taking the signatures in
    # turn: an engine that falls back to one parameter set at a time when traffic mixes them.
    sampling_alignment: str = "mixed"
    # True: the seeded rows of a step draw their noise from one generator shared by the batch
    # (seeded from its first seeded row), so a seeded answer depends on its batch company.
    shared_sampler_seed: bool = False
    interactive: ClassConfig = field(default_factory=ClassConfig)
    batch: ClassConfig = field(default_factory=_batch_class_default)

    def __post_init__(self) -> None:
        _choice("policy", self.policy, POLICIES)
        _choice("batch_api_priority", self.batch_api_priority, ("batch", "interactive"))
        _choice("sampling_alignment", self.sampling_alignment, SAMPLING_ALIGNMENTS)
        if self.batch_max_running_with_interactive is not None:
            _int(
                "batch_max_running_with_interactive",
                self.batch_max_running_with_interactive,
                minimum=1,
            )
        _number("interactive_active_ms", self.interactive_active_ms, minimum=0.0, maximum=600_000.0)
        _number("slo_target_ms", self.slo_target_ms, minimum=0.1, maximum=600_000.0)
        _int("slo_min_prefill_tokens", self.slo_min_prefill_tokens, minimum=1)
        _int("max_num_seqs", self.max_num_seqs, minimum=1)
        _int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=1)
        _int("max_prefill_chunk_tokens", self.max_prefill_chunk_tokens, minimum=1)
        _int("max_starvation_steps", self.max_starvation_steps, minimum=1)
        for name in ("shared_queue", "enable_prefix_caching", "shared_sampler_seed"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be a boolean, got {getattr(self, name)!r}")
        for name in ("interactive", "batch"):
            if not isinstance(getattr(self, name), ClassConfig):
                raise ConfigError(name, "must be a ClassConfig")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # Every running sequence must be able to decode in the same step.
            raise ConfigError(
                "max_num_batched_tokens",
                f"must be >= max_num_seqs ({self.max_num_seqs}), got {self.max_num_batched_tokens}",
            )

    def class_config(self, priority: str) -> ClassConfig:
        return self.interactive if priority == "interactive" else self.batch

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchingConfig:
        _check_keys(cls, data)
        values = dict(data)
        for name in ("interactive", "batch"):
            if name in values and not isinstance(values[name], ClassConfig):
                try:
                    # A partial class dict keeps that class's own defaults for the rest.
                    _check_keys(ClassConfig, values[name])
                    default = _CLASS_DEFAULTS[name]().to_dict()
                    values[name] = ClassConfig.from_dict({**default, **values[name]})
                except ConfigError as exc:
                    raise exc.with_prefix(name) from None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def merged(self, changes: dict[str, Any]) -> BatchingConfig:
        """A new config with `changes` (a partial, possibly nested dict) applied; validated."""
        _check_keys(type(self), changes)
        data = self.to_dict()
        for key, value in changes.items():
            if key in ("interactive", "batch") and isinstance(value, dict):
                try:
                    _check_keys(ClassConfig, value)
                except ConfigError as exc:
                    raise exc.with_prefix(key) from None
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return BatchingConfig.from_dict(data)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Everything the engine needs at start; `batching` may change later."""

    model: str = "tiny"
    model_path: str | None = None
    device: str = "auto"
    dtype: str | None = None  # None => bfloat16 on CUDA, float32 on CPU
    seed: int = 0
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None  # None => the runner's default budget
    # vLLM's name: the KV pool in blocks whatever the model's bytes per token (a budget in bytes
    # holds 4x fewer tokens on a model with 4x the KV width). Wins over the byte budget.
    num_gpu_blocks_override: int | None = None
    gpu_memory_utilization: float = 0.5
    watermark_ratio: float = 0.01
    max_model_len: int = 2048
    max_tokens_cap: int = 4096
    step_log_size: int = 4096
    step_log_path: str | None = None
    # torch intra-op threads. None = auto: on CPU max(1, min(8, cpu_count - 1)), leaving a core
    # for the HTTP loop and a load generator (on a busy 2-core box 2 threads made each step ~5x
    # slower than 1, docs/model.md); on CUDA torch's own setting is kept.
    torch_num_threads: int | None = None
    # Every token row's logits independent of the rest of the step (row count, padding, chunking,
    # prefill or decode), so a greedy or seeded answer is the same alone, in any batch, after a
    # preemption recompute and from the prefix cache. Measured cost and the default's reasons:
    # docs/engine.md, "Batch invariance".
    batch_invariant: bool = True
    batching: BatchingConfig = field(default_factory=BatchingConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("model", f"must be a non-empty string, got {self.model!r}")
        _optional_str("model_path", self.model_path)
        _choice("device", self.device, DEVICES)
        if self.dtype is not None:
            _choice("dtype", self.dtype, DTYPES)
        _int("seed", self.seed, minimum=0)
        _int("block_size", self.block_size, minimum=1)
        if self.kv_cache_memory_bytes is not None:
            _int("kv_cache_memory_bytes", self.kv_cache_memory_bytes, minimum=1)
        if self.num_gpu_blocks_override is not None:
            _int("num_gpu_blocks_override", self.num_gpu_blocks_override, minimum=1)
        _number("gpu_memory_utilization", self.gpu_memory_utilization, minimum=0.01, maximum=1.0)
        _number("watermark_ratio", self.watermark_ratio, minimum=0.0, maximum=0.5)
        _int("max_model_len", self.max_model_len, minimum=2)
        _int("max_tokens_cap", self.max_tokens_cap, minimum=1)
        _int("step_log_size", self.step_log_size, minimum=1)
        _optional_str("step_log_path", self.step_log_path)
        if self.torch_num_threads is not None:
            _int("torch_num_threads", self.torch_num_threads, minimum=1)
        if not isinstance(self.batch_invariant, bool):
            raise ConfigError("batch_invariant", f"must be a boolean, got {self.batch_invariant!r}")
        if not isinstance(self.batching, BatchingConfig):
            raise ConfigError("batching", "must be a BatchingConfig")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        _check_keys(cls, data)
        values = dict(data)
        if "batching" in values and not isinstance(values["batching"], BatchingConfig):
            try:
                values["batching"] = BatchingConfig.from_dict(values["batching"])
            except ConfigError as exc:
                raise exc.with_prefix("batching") from None
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
