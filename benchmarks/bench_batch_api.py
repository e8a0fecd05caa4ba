"""Batch API throughput: a job of short lines through the server vs the offline engine.

Run: .venv/bin/python -m benchmarks.bench_batch_api [--lines 10000] [--max-tokens 32]
     [--repeats 2] [--batch-max-inflight N] (default: the server's own, 2 x --max-num-seqs)

1. Offline: the same requests go straight into `Engine` (no HTTP, no asyncio, no SQLite), fed
   as capacity frees (at most 2 x max_num_seqs unfinished), stepped to the end.
2. Batch API: a `python -m reference_server` subprocess with the same engine settings and no
   other traffic; the lines are uploaded with the `openai` client (files.create), run as one
   job (batches.create, /v1/completions, token-id prompts, ignore_eos, seeded), and the job is
   polled until it completes. Time = batch created -> completed seen (polled every 0.1 s);
   output tokens = the job's usage.output_tokens. Ratio = job tokens/s / offline tokens/s
   (target >= 0.90).
Both sides use the same torch thread count; runs alternate (offline, job, offline, job, ...)
and the best of each side counts, so other load on a shared machine hits both alike. Prints a
table and writes benchmarks/results/batch_api.json.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.harness import RESULTS_DIR, Server, host_facts, print_table, write_result
from reference_server.config import BatchingConfig, EngineConfig
from reference_server.engine import Engine
from reference_server.sampling_params import SamplingParams


def workload(num_lines: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(32, 127) for _ in range(prompt_tokens)] for _ in range(num_lines)]


def run_offline(config: EngineConfig, prompts: list[list[int]], max_tokens: int) -> dict:
    import torch

    torch.set_num_threads(1 if config.torch_num_threads is None else config.torch_num_threads)
    engine = Engine(config)
    engine.add_request("warmup", prompts[0], SamplingParams(max_tokens=4, ignore_eos=True, seed=0))
    while engine.has_unfinished():
        engine.step()
    window = 2 * config.batching.max_num_seqs
    started = time.perf_counter()
    tokens = 0
    next_index = 0
    while next_index < len(prompts) or engine.has_unfinished():
        while next_index < len(prompts) and engine.num_unfinished() < window:
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, seed=next_index)
            engine.add_request(f"r{next_index}", prompts[next_index], params, priority="batch")
            next_index += 1
        result = engine.step()
        tokens += sum(len(o.new_token_ids) for o in result.outputs)
    elapsed = time.perf_counter() - started
    engine.close()
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_second": tokens / elapsed}


def bundled_server(args: argparse.Namespace, workdir: Path) -> Server:
    """The bundled server with the offline side's engine settings (not started); its Batch API
    files live under `workdir`."""
    inflight = () if args.batch_max_inflight is None else (
        "--batch-max-inflight", str(args.batch_max_inflight))  # fmt: skip
    return Server.bundled(
        "--device", args.device, "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens), "--log-level", "warning",
        "--torch-num-threads", str(args.torch_threads), "--data-dir", str(workdir / "data"),
        *inflight, workdir=workdir, env={"OMP_NUM_THREADS": str(args.torch_threads)},
    )  # fmt: skip


def run_job(url: str, prompts: list[list[int]], max_tokens: int) -> dict:
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600)
    lines = [
        json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                    "body": {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                             "seed": i}})
        for i, prompt in enumerate(prompts)
    ]  # fmt: skip
    data = ("\n".join(lines) + "\n").encode()
    upload_started = time.perf_counter()
    uploaded = client.files.create(file=("bench.jsonl", io.BytesIO(data)), purpose="batch")
    upload_seconds = time.perf_counter() - upload_started
    started = time.perf_counter()
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h"
    )
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        time.sleep(0.1)
        batch = client.batches.retrieve(batch.id)
    elapsed = time.perf_counter() - started
    if batch.status != "completed" or batch.request_counts.failed:
        raise SystemExit(f"job ended {batch.status} with {batch.request_counts}")
    tokens = batch.usage.output_tokens
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_second": tokens / elapsed,
            "upload_seconds": upload_seconds, "upload_bytes": len(data),
            "lines": batch.request_counts.total}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="engine device (default: cpu)")
    parser.add_argument("--lines", type=int, default=10_000, help="lines in the job")
    # The project's "short" length class (loadgen short chats: 16..64 tokens each way).
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per line")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument(
        "--batch-max-inflight",
        type=int,
        default=None,
        help="the server's --batch-max-inflight (default: its own default)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="best of N for both sides")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads on both sides (default 1)",
    )
    parser.add_argument("--output", default=str(RESULTS_DIR / "batch_api.json"))
    args = parser.parse_args()
    config = EngineConfig(
        device=args.device,
        torch_num_threads=args.torch_threads,
        batching=BatchingConfig(
            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens
        ),
    )
    prompts = workload(args.lines, args.prompt_tokens, seed=0)
    offline_runs: list[dict] = []
    job_runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, bundled_server(args, Path(tmp)) as server:
        for _ in range(args.repeats):
            offline_runs.append(run_offline(config, prompts, args.max_tokens))
            job_runs.append(run_job(server.url, prompts, args.max_tokens))
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    offline = max(offline_runs, key=lambda r: r["tokens_per_second"])
    job = max(job_runs, key=lambda r: r["tokens_per_second"])
    ratio = job["tokens_per_second"] / offline["tokens_per_second"]
    inflight = next(
        int(float(row.split()[-1]))
        for row in metrics.splitlines()
        if row.startswith("batchgate_batch_job_max_inflight ")
    )
    result = {
        "workload": {"lines": args.lines, "prompt_tokens": args.prompt_tokens,
                     "max_tokens": args.max_tokens, "device": args.device,
                     "max_num_seqs": args.max_num_seqs, "batch_max_inflight": inflight,
                     "torch_threads": args.torch_threads, "repeats": args.repeats},
        "offline": offline,
        "batch_api": job,
        "offline_runs": offline_runs,
        "batch_api_runs": job_runs,
        "batch_to_offline_ratio": ratio,
        "target_ratio": 0.9,
        "host": host_facts(),
    }  # fmt: skip
    write_result(args.output, result)
    rows = [
        ("lines x output tokens", f"{args.lines} x {args.max_tokens}"),
        ("batch job in-flight bound (lines)", f"{inflight}"),
        ("offline engine output tokens/s", f"{offline['tokens_per_second']:.1f}"),
        ("Batch API job output tokens/s", f"{job['tokens_per_second']:.1f}"),
        ("job / offline (target >= 0.90)", f"{ratio:.3f}"),
        ("offline seconds", f"{offline['seconds']:.1f}"),
        ("job seconds (created -> completed)", f"{job['seconds']:.1f}"),
        ("upload seconds", f"{job['upload_seconds']:.2f}"),
    ]
    print_table(("measure", "value"), rows)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
