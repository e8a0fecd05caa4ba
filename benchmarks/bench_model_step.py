"""Model step timings of the reference server's ModelRunner: decode steps at several batch sizes
with ~200-token contexts, and a 512-token prefill. Prints a table, writes JSON.

    .venv/bin/python -m benchmarks.bench_model_step [--model tiny] [--device auto]

A measurement script, not a test: nothing here asserts a speed. gpu_sections.py imports its
`bench_decode` as `benchmarks.bench_model_step`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from reference_server.model_runner import ModelRunner
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import ScheduledChunk, Sequence


def _sequences(runner: ModelRunner, count: int, prompt_len: int, first_block: int) -> list:
    seqs, next_block = [], first_block
    blocks_each = (prompt_len + 64 + runner.block_size - 1) // runner.block_size
    for i in range(count):
        prompt = [(i * 37 + j * 11) % 256 for j in range(prompt_len)]
        seq = Sequence(
            f"b{i}",
            prompt,
            SamplingParams(temperature=0.8, top_p=0.95, seed=i),
            priority="interactive",
            arrival_time=0.0,
        )
        seq.block_table = list(range(next_block, next_block + blocks_each))
        next_block += blocks_each
        seqs.append(seq)
    return seqs


def _advance(chunks: list[ScheduledChunk], tokens: list[int | None]) -> None:
    for chunk, token in zip(chunks, tokens, strict=True):
        chunk.seq.num_computed_tokens += chunk.num_new_tokens
        if token is not None:
            chunk.seq.output_token_ids.append(token)


def _sync(runner: ModelRunner) -> None:
    if runner.device == "cuda":
        torch.cuda.synchronize()


def bench_decode(runner: ModelRunner, batch: int, context: int, steps: int) -> dict:
    seqs = _sequences(runner, batch, context, first_block=0)
    for seq in seqs:  # prefill one at a time: only the decode steps are timed
        chunk = ScheduledChunk(seq, seq.num_tokens, True)
        _advance([chunk], runner.execute([chunk]))
    times, cpu_times = [], []
    for _ in range(steps):
        chunks = [ScheduledChunk(seq, 1, True) for seq in seqs]
        _sync(runner)
        start, cpu_start = time.perf_counter(), time.process_time()
        tokens = runner.execute(chunks)
        _sync(runner)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        _advance(chunks, tokens)
    return _summary(f"decode x{batch} (ctx ~{context})", times, cpu_times, tokens_per_step=batch)


def bench_prefill(runner: ModelRunner, length: int, repeats: int) -> dict:
    times, cpu_times = [], []
    for _ in range(repeats):
        (seq,) = _sequences(runner, 1, length, first_block=0)
        chunk = ScheduledChunk(seq, length, True)
        _sync(runner)
        start, cpu_start = time.perf_counter(), time.process_time()
        runner.execute([chunk])
        _sync(runner)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return _summary(f"prefill {length}", times, cpu_times, tokens_per_step=length)


def _summary(
    name: str, times: list[float], cpu_times: list[float], *, tokens_per_step: int
) -> dict:
    # The first calls pay allocator/dispatch warm-up. The minimum is reported next to the
    # median because on a shared machine the median also measures the neighbours.
    warm, warm_cpu = (times[2:], cpu_times[2:]) if len(times) > 4 else (times, cpu_times)
    median = statistics.median(warm)
    return {
        "case": name,
        "min_ms": min(warm) * 1e3,
        "median_ms": median * 1e3,
        "p90_ms": sorted(warm)[int(0.9 * (len(warm) - 1))] * 1e3,
        "median_cpu_ms": statistics.median(warm_cpu) * 1e3,
        "tokens_per_second": tokens_per_step / median,
        "samples": len(warm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--out", default="benchmarks/results/model_step.json")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]

    runner = ModelRunner(model=args.model, device=args.device, max_model_len=1024)
    rows = [bench_decode(runner, batch, args.context, args.steps) for batch in (1, 16, 64)]
    rows.append(bench_prefill(runner, 512, max(5, args.steps // 4)))

    load_after = os.getloadavg()[0]
    print(
        f"model={runner.model_name} device={runner.device} dtype={runner.dtype} "
        f"params={runner.model_config.num_parameters():,} threads={torch.get_num_threads()} "
        f"loadavg={load_before:.1f}->{load_after:.1f} on {os.cpu_count()} cpus"
    )
    print(f"{'case':<24}{'min ms':>9}{'median ms':>11}{'p90 ms':>9}{'cpu ms':>9}{'tok/s':>9}")
    for row in rows:
        print(
            f"{row['case']:<24}{row['min_ms']:>9.2f}{row['median_ms']:>11.2f}"
            f"{row['p90_ms']:>9.2f}{row['median_cpu_ms']:>9.2f}{row['tokens_per_second']:>9.0f}"
        )
    result = {
        "model": runner.model_name,
        "device": runner.device,
        "dtype": str(runner.dtype).removeprefix("torch."),
        "num_parameters": runner.model_config.num_parameters(),
        "torch_version": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "load_average_1m": [load_before, load_after],
        "cpu": platform.processor() or platform.machine(),
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
