"""`python -m reference_server`: one command-line flag per typed config field.

Owns the flag generation (walking the `EngineConfig` / `BatchingConfig` / `ClassConfig` and
`ServerConfig` dataclass fields, so a field added there gets a flag here), the help text (units
and defaults), and turning parsed flags into validated configs. Errors name the flag and exit 2.
It knows nothing about serving; `serve.run_server` does that.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reference_server.api.server_config import (
    ENGINE_CORE_PLACEMENTS,
    LOG_LEVELS,
    SERVER_FIELD_HELP,
    ServerConfig,
    ServerConfigError,
)
from reference_server.config import DEVICES, POLICIES, SAMPLING_ALIGNMENTS, EngineConfig
from reference_server.errors import ConfigError

__all__ = ["ENGINE_FIELD_HELP", "Flag", "build_parser", "engine_flags", "main", "parse_configs"]

# Keyed by the field's dotted path in EngineConfig. A field missing here still gets a flag with a
# generic help line (the docs test lists which ones lack a description).
ENGINE_FIELD_HELP: dict[str, str] = {
    "model": "model preset name (e.g. tiny) or a name for --model-path weights",
    "model_path": "directory of a Llama-format safetensors checkpoint to load instead of "
    "seeded random weights",
    "device": "auto (cuda when available), cpu or cuda",
    "dtype": "float32, bfloat16 or float16 ('none' = bfloat16 on CUDA, float32 on CPU)",
    "seed": "seed of the random weights and of requests that give no seed",
    "block_size": "tokens per KV cache block",
    "kv_cache_memory_bytes": "KV cache pool size in bytes ('none' = the runner's default budget)",
    "num_gpu_blocks_override": "KV cache pool size in blocks whatever the model (vLLM's flag; "
    "wins over the byte budget)",
    "gpu_memory_utilization": "on CUDA, fraction (0..1) of free device memory for the KV pool",
    "watermark_ratio": "fraction (0..0.5) of KV blocks kept free when admitting new requests",
    "max_model_len": "context length in tokens: prompt + max_tokens must fit",
    "max_tokens_cap": "largest max_tokens a request may ask for, in tokens",
    "step_log_size": "step records kept in memory for GET /admin/steps",
    "step_log_path": "also append every step record to this JSONL file",
    "torch_num_threads": (
        "torch intra-op CPU threads (none = auto: all cores but one, 1..8, on CPU; "
        "torch's own default on CUDA)"
    ),
    "batching.policy": "batching policy: " + ", ".join(POLICIES),
    "batching.max_num_seqs": "most sequences running in one step",
    "batching.max_num_batched_tokens": "token budget of one step (prefill + decode), in tokens",
    "batching.max_prefill_chunk_tokens": "largest prefill chunk of one request per step, "
    "in tokens (chunked prefill)",
    "batching.max_starvation_steps": "anti-starvation: steps the batch class may wait while "
    "interactive requests are admitted before its head goes first",
    "batching.shared_queue": "put both priority classes in one FIFO (a deliberately bad "
    "setting, to demonstrate head-of-line blocking)",
    "batching.batch_max_running_with_interactive": "most batch-class sequences running while "
    "interactive traffic is active (continuous policy; 'none' = no cap): room for chat beside "
    "offline jobs",
    "batching.interactive_active_ms": "interactive traffic counts as active this long after its "
    "last arrival, in milliseconds",
    "batching.slo_target_ms": "slo policy: the step-time target its per-step token budget is "
    "sized to, in milliseconds",
    "batching.slo_min_prefill_tokens": "slo policy: prefill tokens a step always gets when a "
    "prompt waits (no starvation of long prompts), in tokens",
    "batching.enable_prefix_caching": "automatic prefix caching: share the KV of a prompt's "
    "leading full blocks already computed for an earlier request instead of prefilling them "
    "again (vLLM's design and default)",
    "batching.batch_api_priority": "priority class of Batch API job lines: batch (default) or "
    "interactive (jobs on the chat path, a deliberately bad setting)",
    "batching.sampling_alignment": "mixed (default): one step serves rows with any sampling "
    "parameters; strict: a step serves only rows of one sampling signature, in turn (a "
    "deliberately bad setting: the fall-back to one parameter set at a time)",
    "batching.shared_sampler_seed": "seeded rows of a step draw from one generator shared by "
    "the batch, so seeded answers depend on their batch company (a deliberately bad setting)",
    "batch_invariant": "batch-invariant forward: each row's logits independent of the rest of "
    "the step (fixed-shape kernels; docs/engine.md for the measured cost)",
}
for _cls in ("interactive", "batch"):
    ENGINE_FIELD_HELP.update(
        {
            f"batching.{_cls}.max_waiting": f"{_cls} class: most queued requests; more get 429",
            f"batching.{_cls}.max_batch_size": f"{_cls} class: most requests in one "
            "dynamic/static batch",
            f"batching.{_cls}.max_wait_ms": f"{_cls} class: dynamic policy window, the longest "
            "the oldest queued request waits for a batch, in milliseconds",
            f"batching.{_cls}.dispatch_threshold": f"{_cls} class: dynamic policy adaptive "
            "dispatch, a batch goes at once when this many are queued ('none' = off)",
        }
    )

_CHOICES = {
    ("engine", "batching.policy"): POLICIES,
    ("engine", "batching.batch_api_priority"): ("batch", "interactive"),
    ("engine", "batching.sampling_alignment"): SAMPLING_ALIGNMENTS,
    ("engine", "device"): DEVICES,
    ("server", "log_level"): LOG_LEVELS,
    ("server", "engine_core"): ENGINE_CORE_PLACEMENTS,
}
_METAVARS = {int: "N", float: "NUM", str: "TEXT"}
_UNIT_SUFFIXES = {
    "_ms": "milliseconds",
    "_seconds": "seconds",
    "_bytes": "bytes",
    "_ratio": "ratio 0..1",
    "_tokens": "tokens",
}


@dataclass(frozen=True, kw_only=True)
class Flag:
    """One command-line flag and the config field it sets."""

    option: str  # e.g. "--interactive-max-wait-ms"
    path: tuple[str, ...]  # field path inside its config, e.g. ("batching", "interactive", ...)
    target: str  # "engine" | "server"
    kind: type  # int, float, str or bool
    optional: bool  # accepts "none"
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return f"{self.target}__" + "__".join(self.path)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the non-None type, whether None is allowed)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _walk(cls: type, instance: Any, path: tuple[str, ...], target: str) -> list[Flag]:
    hints = typing.get_type_hints(cls)
    flags: list[Flag] = []
    for field in dataclasses.fields(cls):
        kind, optional = _unwrap(hints[field.name])
        default = getattr(instance, field.name)
        field_path = (*path, field.name)
        if dataclasses.is_dataclass(kind):
            flags.extend(_walk(kind, default, field_path, target))
            continue
        if kind not in (int, float, str, bool):
            raise TypeError(f"no flag type for config field {'.'.join(field_path)}: {kind}")
        # "batching." is implied: --policy, --max-num-seqs, --interactive-max-wait-ms.
        name_parts = field_path[1:] if field_path[0] == "batching" else field_path
        dotted = ".".join(field_path)
        if target == "engine":
            text = ENGINE_FIELD_HELP.get(dotted) or _generic_help(field.name)
        else:
            text = SERVER_FIELD_HELP.get(dotted) or _generic_help(field.name)
        choices = _CHOICES.get((target, dotted))
        flags.append(
            Flag(
                option="--" + "-".join(name_parts).replace("_", "-"),
                path=field_path,
                target=target,
                kind=kind,
                optional=optional,
                default=default,
                help=text,
                choices=choices,
            )
        )
    return flags


def _generic_help(name: str) -> str:
    for suffix, unit in _UNIT_SUFFIXES.items():
        if name.endswith(suffix):
            return f"{name.replace('_', ' ')} ({unit})"
    return name.replace("_", " ")


def engine_flags() -> list[Flag]:
    flags = _walk(EngineConfig, EngineConfig(), (), "engine")
    flags += _walk(ServerConfig, ServerConfig(), (), "server")
    seen: dict[str, Flag] = {}
    for flag in flags:
        if flag.option in seen:
            raise TypeError(f"two config fields map to {flag.option}")
        seen[flag.option] = flag
    return flags


def _converter(flag: Flag) -> Any:
    def convert(text: str) -> Any:
        if flag.optional and text.strip().lower() in ("none", "null"):
            return None
        if flag.kind is int:
            try:
                return int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if flag.kind is float:
            try:
                return float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        return text

    convert.__name__ = flag.kind.__name__
    return convert


class _PrintTokenizerDir(argparse.Action):
    """Like --version: prints the shipped Hugging Face tokenizer directory and exits 0."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        from reference_server.hf_tokenizer_files import hf_tokenizer_dir

        print(hf_tokenizer_dir())
        parser.exit(0)


def build_parser() -> tuple[argparse.ArgumentParser, list[Flag]]:
    parser = argparse.ArgumentParser(
        # `batchgate serve` execs this module with its own name (gate/commands/serve.py).
        prog=os.environ.get("BATCHGATE_PROG") or "python -m reference_server",
        description="batchgate's reference server: an OpenAI-compatible API over a paged-KV "
        "engine with continuous / dynamic / static batching. See docs/server.md.",
        epilog="exit codes: 0 stopped cleanly (SIGTERM or Ctrl-C, requests drained), 1 the "
        "engine died, 2 usage error (a bad flag or value)",
    )
    parser.add_argument(
        "--print-tokenizer-dir",
        action=_PrintTokenizerDir,
        nargs=0,
        help="print the directory of the Hugging Face tokenizer files that count tokens as "
        "the server does (for a client's --tokenizer) and exit",
    )
    flags = engine_flags()
    groups = {
        "engine": parser.add_argument_group("engine (fixed at start)"),
        "batching": parser.add_argument_group("batching (live-changeable: PUT /admin/batching)"),
        "server": parser.add_argument_group("HTTP server"),
    }
    for flag in flags:
        group_name = "batching" if flag.path[0] == "batching" else flag.target
        shown_default = "none" if flag.default is None else flag.default
        text = f"{flag.help} (default: {shown_default})"
        group = groups[group_name]
        if flag.kind is bool:
            group.add_argument(
                flag.option,
                dest=flag.dest,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
            continue
        group.add_argument(
            flag.option,
            dest=flag.dest,
            type=_converter(flag),
            choices=flag.choices,
            default=argparse.SUPPRESS,
            metavar=_METAVARS[flag.kind] if flag.choices is None else None,
            help=text,
        )
    return parser, flags


def flag_for(field: str, *, target: str = "engine") -> str:
    """The command-line flag of a dotted config field name (the field itself if none)."""
    path = tuple(field.split("."))
    for flag in engine_flags():
        if flag.target == target and flag.path == path:
            return flag.option
    return field


def parse_configs(argv: Sequence[str] | None = None) -> tuple[EngineConfig, ServerConfig]:
    """Parse flags into validated configs; exits 2 naming the flag when a value is invalid."""
    parser, flags = build_parser()
    args = vars(parser.parse_args(argv))
    engine: dict[str, Any] = {}
    server: dict[str, Any] = {}
    by_path = {(f.target, f.path): f for f in flags}
    for flag in flags:
        if flag.dest not in args:
            continue
        node = engine if flag.target == "engine" else server
        for part in flag.path[:-1]:
            node = node.setdefault(part, {})
        node[flag.path[-1]] = args[flag.dest]
    try:
        engine_config = EngineConfig.from_dict(engine)
    except ConfigError as exc:
        flag = by_path.get(("engine", tuple(exc.field.split("."))))
        parser.error(f"{flag.option if flag else exc.field}: {exc.message}")
    try:
        server_config = ServerConfig.from_dict(server)
    except ServerConfigError as exc:
        flag = by_path.get(("server", (exc.field,)))
        parser.error(f"{flag.option if flag else exc.field}: {exc.message}")
    return engine_config, server_config


def main(argv: Sequence[str] | None = None) -> int:
    engine_config, server_config = parse_configs(argv)
    from reference_server.api.serve import run_server  # imports torch; keep --help fast

    try:
        return run_server(engine_config, server_config)
    except ConfigError as exc:
        # Limits only the model can check (e.g. max_model_len vs its positions) surface here.
        print(f"error: {flag_for(exc.field)}: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
