"""Benchmark: does a row's answer depend on its batch? The reference engine's default forward
and its batch-invariant forward (`--batch-invariant`), side by side in one run.

Part 1, invariance. One target request (greedy, and seeded at temperature 0.8) is generated
alone, then again with 1..63 companion requests of mixed lengths and sampling settings arriving
with it (batches of 2..64), after preemption by recompute (a KV pool too small for everyone),
with its prompt prefilled in 16-token chunks, and again on a warm prefix cache. At every output
position the target's logits (before sampling) are compared bit for bit with the lone run's:
equal positions, the largest absolute difference, and whether the tokens are the same.

Part 2, cost. Median CPU time of the engine's decode steps at batch sizes 1, 4, 16 and 64
(prompts of 64 tokens, 48 tokens each), and of one 512-token prefill, per mode, with the ratio
invariant / default. CPU time, not wall time: on a machine shared with other work the wall
time of a step measures the neighbours (torch runs the forward on this process's threads).

Prints both tables and writes benchmarks/results/batch_invariance.json.

    .venv/bin/python -m benchmarks.bench_batch_invariance [--threads N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from reference_server import BatchingConfig, Engine, EngineConfig, SamplingParams

RESULTS = Path(__file__).resolve().parent / "results" / "batch_invariance.json"
TARGET_PROMPT = [1, *(random.Random(7).randrange(32, 127) for _ in range(40))]
TARGET_TOKENS = 24
COMPANION_COUNTS = (0, 1, 2, 3, 7, 15, 31, 47, 63)  # batch sizes 1..64
TARGETS = {
    "greedy": SamplingParams(max_tokens=TARGET_TOKENS, temperature=0.0, ignore_eos=True),
    "seeded": SamplingParams(max_tokens=TARGET_TOKENS, temperature=0.8, seed=1234, ignore_eos=True),
}


def _engine(args: argparse.Namespace, invariant: bool, **overrides: Any) -> Engine:
    batching = overrides.pop("batching", {})
    config = EngineConfig(
        device=args.device,
        torch_num_threads=args.threads,
        batch_invariant=invariant,
        watermark_ratio=0.0,
        batching=BatchingConfig.from_dict(batching),
        **overrides,
    )
    return Engine(config)


def _record_logits(engine: Engine, target_id: str) -> dict[int, torch.Tensor]:
    """Hooks the allowed-token mask, which sees each step's raw logits first."""
    captured: dict[int, torch.Tensor] = {}
    mask = engine.runner.allowed_tokens
    original = mask.apply

    def apply(logits, seqs):  # type: ignore[no-untyped-def]
        for row, seq in enumerate(seqs):
            if seq.request_id == target_id:
                captured[len(seq.output_token_ids)] = logits[row].detach().cpu().clone()
        return original(logits, seqs)

    mask.apply = apply  # type: ignore[method-assign]
    return captured


def _companion_params(rng: random.Random) -> SamplingParams:
    choice = rng.randrange(4)
    max_tokens = TARGET_TOKENS + rng.randrange(0, 24)
    if choice == 0:
        return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    if choice == 1:
        return SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=0.9, ignore_eos=True)
    if choice == 2:
        return SamplingParams(
            max_tokens=max_tokens, temperature=0.7, top_k=20, presence_penalty=0.5, ignore_eos=True
        )
    return SamplingParams(
        max_tokens=max_tokens, temperature=1.2, thinking=True, thinking_tokens=8, ignore_eos=True
    )


def _run(
    engine: Engine,
    target: SamplingParams,
    companions: int,
    *,
    rounds: int = 1,
    target_priority: str = "interactive",
) -> tuple[list[int], dict[int, torch.Tensor], int]:
    """(target tokens, target logits by position, target preemptions) of the last round. A
    "batch"-class target is the preemption victim whenever the KV pool runs short."""
    rng = random.Random(companions)
    tokens: list[int] = []
    logits: dict[int, torch.Tensor] = {}
    preemptions = 0
    for round_index in range(rounds):
        target_id = f"target-{round_index}"
        logits = _record_logits(engine, target_id)
        tokens = []
        if target_priority == "batch":
            # The victim case: the target runs first, then chat traffic fills the KV pool.
            engine.add_request(target_id, list(TARGET_PROMPT), target, priority="batch")
            for _ in range(4):
                _collect(engine.step().outputs, target_id, tokens)
        for i in range(companions):
            longest = 300 if target_priority != "batch" else 120  # the small pool's case: shorter
            prompt = [1, *(rng.randrange(32, 127) for _ in range(rng.randrange(4, longest)))]
            engine.add_request(f"c{round_index}-{i}", prompt, _companion_params(rng))
        if target_priority != "batch":
            engine.add_request(target_id, list(TARGET_PROMPT), target)
        while engine.has_unfinished():
            preemptions = _collect(engine.step().outputs, target_id, tokens, preemptions)
    return tokens, logits, preemptions


def _collect(outputs: list, target_id: str, tokens: list[int], preemptions: int = 0) -> int:
    for output in outputs:
        if output.request_id == target_id:
            tokens.extend(output.new_token_ids)
            preemptions = output.num_preemptions
    return preemptions


def _compare(alone: tuple, other: tuple) -> dict[str, Any]:
    tokens0, logits0, _ = alone
    tokens1, logits1, preemptions = other
    equal = sum(torch.equal(logits0[p], logits1[p]) for p in logits0)
    diff = max(float((logits0[p] - logits1[p]).abs().max()) for p in logits0)
    return {
        "positions": len(logits0),
        "bitwise_equal_positions": equal,
        "max_abs_diff": diff,
        "tokens_equal": tokens0 == tokens1,
        "target_preemptions": preemptions,
    }


def invariance(args: argparse.Namespace, invariant: bool) -> list[dict[str, Any]]:
    rows = []
    for name, target in TARGETS.items():
        alone = _run(_engine(args, invariant), target, 0)
        for companions in COMPANION_COUNTS:
            result = _run(_engine(args, invariant), target, companions)
            rows.append({"target": name, "case": f"batch {companions + 1}",
                         **_compare(alone, result)})  # fmt: skip
        cases = {
            # 16 blocks of 16 tokens for 16 requests, the target in the lower class: it is the
            # preemption victim and is recomputed (its preemptions are in the table).
            "recompute": (_engine(args, invariant, num_gpu_blocks_override=16), 15, 1, "batch"),
            "chunked prefill 16": (
                _engine(args, invariant, batching={"max_prefill_chunk_tokens": 16}),
                0,
                1,
                "interactive",
            ),
            "prefix cache hit": (_engine(args, invariant), 0, 2, "interactive"),
        }
        for case, (engine, companions, rounds, priority) in cases.items():
            result = _run(engine, target, companions, rounds=rounds, target_priority=priority)
            rows.append({"target": name, "case": case, **_compare(alone, result)})
    return rows


def _step_cpu_ms(engine: Engine, prompts: list[list[int]], max_tokens: int) -> list[float]:
    """CPU milliseconds of each decode step (this process's CPU time: on a machine shared with
    other work, wall time measures the neighbours; the forward runs on this process's threads)."""
    for i, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.8, ignore_eos=True)
        engine.add_request(f"r{i}", prompt, params)
    cpu_ms = []
    while engine.has_unfinished():
        start = time.process_time()
        record = engine.step().record
        if record is not None and record.num_prefill_tokens == 0:
            cpu_ms.append((time.process_time() - start) * 1000.0)
    return cpu_ms


def _cost_row(case: str, samples: dict[bool, list[float]]) -> dict[str, Any]:
    default_ms, invariant_ms = (statistics.median(samples[m]) for m in (False, True))
    return {
        "case": case,
        "default_ms": round(default_ms, 3),
        "invariant_ms": round(invariant_ms, 3),
        "ratio": round(invariant_ms / default_ms, 3),
        "samples": {"default": len(samples[False]), "invariant": len(samples[True])},
    }


def cost(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Median CPU ms per step; the prefix cache off so repeated prompts are computed again."""
    rng = random.Random(3)
    rows = []
    engines = {
        mode: _engine(args, mode, batching={"enable_prefix_caching": False})
        for mode in (False, True)
    }
    for batch in (1, 4, 16, 64):
        prompts = [[1, *(rng.randrange(32, 127) for _ in range(63))] for _ in range(batch)]
        samples: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):  # alternate so drift hits both alike
            for mode, engine in engines.items():
                samples[mode].extend(_step_cpu_ms(engine, prompts, 48))
        rows.append(_cost_row(f"decode step, batch {batch}", samples))
    prompt = [1, *(rng.randrange(32, 127) for _ in range(511))]
    samples = {False: [], True: []}
    for _ in range(args.repeats):
        for mode, engine in engines.items():
            engine.add_request("p", prompt, SamplingParams(max_tokens=1, ignore_eos=True))
            start = time.process_time()
            while engine.has_unfinished():
                engine.step()
            samples[mode].append((time.process_time() - start) * 1000.0)
    rows.append(_cost_row("prefill 512 tokens", samples))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (auto)")
    parser.add_argument("--repeats", type=int, default=3, help="cost rounds per mode")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--cost-only", action="store_true", help="skip part 1")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "torch": torch.__version__,
            "threads": args.threads or "auto",
            "device": args.device,
        },
        "invariance": {},
    }
    for mode, invariant in (("default", False), ("batch_invariant", True)):
        if args.cost_only:
            break
        rows = invariance(args, invariant)
        result["invariance"][mode] = rows
        print(f"\n{mode} forward: target vs the same target alone")
        print(f"{'target':8} {'case':20} {'equal pos':>10} {'max |diff|':>11} {'tokens':>7} "
              f"{'preempt':>8}")  # fmt: skip
        for row in rows:
            print(f"{row['target']:8} {row['case']:20} "
                  f"{row['bitwise_equal_positions']:>4}/{row['positions']:<5} "
                  f"{row['max_abs_diff']:>11.3g} {'same' if row['tokens_equal'] else 'DIFF':>7} "
                  f"{row['target_preemptions']:>8}")  # fmt: skip
    result["cost"] = cost(args)
    print("\ncost: median CPU ms per step, default vs batch-invariant forward")
    print(f"{'case':24} {'default ms':>11} {'invariant ms':>13} {'ratio':>6}")
    for row in result["cost"]:
        print(f"{row['case']:24} {row['default_ms']:>11.3f} {row['invariant_ms']:>13.3f} "
              f"{row['ratio']:>6.2f}")  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
