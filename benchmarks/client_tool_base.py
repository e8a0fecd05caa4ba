"""The shared shapes of bench_clients.py's tool runs: what a run is given, what it reports.

Owns `RunContext` (target, model, tokenizer, rate, lengths, output dir, capture variant),
`ToolResult` (counts, medians, which ITL definition, the run's window) and `Tool`, the base
of client_tools.py's per-tool command builders and readers. It runs nothing.
"""

from __future__ import annotations

import shlex
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunContext", "Tool", "ToolResult", "median_ms", "shell_line", "tool_bin"]


@dataclass(frozen=True, kw_only=True)
class RunContext:
    url: str  # http://127.0.0.1:PORT, no path
    model: str
    tokenizer: Path
    rate_rps: float
    requests: int
    prompt_tokens: int
    output_tokens: int
    out_dir: Path
    endpoint: str = "chat"  # chat | completions
    stream: bool = True
    # The tool's own defaults: no endpoint, streaming, length or ignore_eos options, only what
    # it cannot run without (target, model, tokenizer, rate, request count).
    bare: bool = False
    variant: str = ""  # the capture variant's label ("" in comparison runs)
    # Arrival seed of the tools that take one (SDK script, Locust, A/A); the batchgate load
    # beside it uses another. Drawn anew each run: a fixed pair would replay the same arrival
    # pattern every run, and its luck would repeat as a steady-looking offset.
    seed: int = 1


@dataclass(kw_only=True)
class ToolResult:
    requests: int
    errors: int
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    # What the tool's ITL is, and so which of batchgate's values it is compared with:
    # "tpot" per request (last token - first token) / (tokens - 1); "chunk" pooled gaps between
    # content chunks; "itl0" pooled per-token gaps with a chunk's tokens all stamped at its
    # arrival (its gap, then zeros); "itl" pooled per-token gaps spread over a chunk's tokens.
    itl_basis: str
    itl_field: str  # the tool's own name of the value compared
    window_wall: tuple[float, float] | None = None  # first send, last end (time.time())
    window_monotonic: tuple[float, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class Tool:
    name: str
    python: Path  # interpreter of the tool's environment
    endpoint: str = "chat"  # what its default run sends (batchgate load matches it)
    arrival: str = "poisson"  # its arrival process in comparison runs (batchgate's: poisson)
    # Capture runs: (label, endpoint, stream); "defaults" is a bare run (RunContext.bare).
    variants: tuple[tuple[str, str, bool], ...] = (
        ("defaults", "chat", True),
        ("chat-stream", "chat", True),
        ("completions-stream", "completions", True),
        ("chat-nostream", "chat", False),
    )

    def version(self) -> str:
        dist = {"openai-sdk": "openai", "batchgate-aa": "batchgate"}.get(self.name, self.name)
        code = f"import importlib.metadata as m; print(m.version({dist!r}))"
        out = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"

    def command(self, ctx: RunContext) -> list[str]:
        raise NotImplementedError

    def env(self, ctx: RunContext) -> dict[str, str]:
        """Environment variables the run needs beside the offline Hugging Face switches."""
        return {}

    def config_text(self, ctx: RunContext) -> str | None:
        """The config file the command names, if any (recorded with captured bodies)."""
        return None

    def read(self, ctx: RunContext) -> ToolResult:
        raise NotImplementedError


def tool_bin(python: Path, name: str) -> str:
    return str(python.parent / name)


def median_ms(values: list[float]) -> float | None:
    return statistics.median(values) * 1000 if values else None


def shell_line(cmd: list[str]) -> str:
    return shlex.join(cmd)
