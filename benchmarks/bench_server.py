"""HTTP overhead of the reference server: streaming tokens/s vs the offline engine, and
server-side vs client-measured TTFT at low load.

Run: .venv/bin/python -m benchmarks.bench_server [--device cpu] [--requests 32] [--max-tokens 128]
(--torch-threads applies to both sides, so they compete for the same cores the same way.)

1. Offline: the same requests go straight into `Engine` (no HTTP, no asyncio), stepped to the end.
2. HTTP: a `python -m reference_server` subprocess with the same engine settings, once with the
   engine core in a child process (the default) and once in a thread (`--engine-core`), side by
   side; the requests are sent at once as streaming /v1/completions (token-id prompts,
   ignore_eos, seeded), and output tokens come from the final usage chunk. Ratio = best HTTP
   tokens/s / best offline tokens/s, and beside it each round's HTTP run over the same round's
   offline run, and each side's wall time split by the engine's step records (step_breakdown.py:
   forward passes, time between steps, the edges). Meanwhile a separate process (server_probe.py,
   started and connected before the run) fetches /health and /metrics in turn every 25 ms: their
   p99 (over the probes of all runs together) is what a liveness probe and a scrape see while the
   engine is saturated. The targets are judged on the median of the same-round ratios and on the
   pooled p99s, each with its 95 % bounds (target_verdict.py): met, not met, or undecided.
3. Low load (low_load_ttft.py): requests one at a time; client TTFT = request sent -> first
   content chunk; server TTFT = the server's batchgate_ttft_seconds histogram (sum/count over
   the same window).
Prints a table and writes benchmarks/results/server.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
import numpy as np

from benchmarks import host_steal, server_probe
from benchmarks.harness import (
    REPO_ROOT,
    RESULTS_DIR,
    Server,
    host_facts,
    normal_priority,
    print_table,
    write_result,
)
from benchmarks.low_load_ttft import run_low_load
from benchmarks.raw_stream import stream_completion
from benchmarks.step_breakdown import breakdown, fetch_steps, latest_seq, side_by_side
from benchmarks.target_verdict import TargetVerdict, judge
from reference_server.config import BatchingConfig, EngineConfig
from reference_server.engine import Engine
from reference_server.errors import ConfigError
from reference_server.sampling_params import SamplingParams

# A /health and /metrics pair every 25 ms: five runs of a few seconds give more than the 299
# probes per path that a 95 % upper bound of a p99 needs (fewer, and it has no upper bound).
PROBE_INTERVAL_SECONDS = 0.025
PLACEMENTS = ("thread", "process")
# The throughput runs' client is woken per 32 KiB, not per token (raw_stream.py): it times no
# first token there, and a per-token wake-up cost the server's cores 0.3 CPU-s a run.
RUN_WAKE_BYTES = 32 * 1024


def workload(num_requests: int, prompt_tokens: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(32, 127) for _ in range(prompt_tokens)] for _ in range(num_requests)]


def run_offline(
    config: EngineConfig, prompts: list[list[int]], max_tokens: int, threads: int
) -> dict:
    import torch

    torch.set_num_threads(threads)
    engine = Engine(config)
    warm = SamplingParams(max_tokens=4, ignore_eos=True, seed=0)
    engine.add_request("warmup", prompts[0], warm)
    while engine.has_unfinished():
        engine.step()
    ticks = host_steal.read()
    started = time.perf_counter()
    for index, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, seed=index)
        engine.add_request(f"r{index}", prompt, params)
    tokens = 0
    records = []
    while engine.has_unfinished():
        result = engine.step()
        tokens += sum(len(o.new_token_ids) for o in result.outputs)
        records.append(result.record)
    elapsed = time.perf_counter() - started
    steal = host_steal.share(ticks, host_steal.read())
    engine.close()
    steps = breakdown([r.to_dict() for r in records if r is not None], elapsed, len(prompts))
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_second": tokens / elapsed,
            "steps": steps, "steal_share": steal}  # fmt: skip


def run_offline_process(args: argparse.Namespace) -> dict:
    """The offline side in its own process at normal priority (this one is niced)."""
    command = [
        sys.executable, "-m", "benchmarks.bench_server", "--offline-only",
        "--device", args.device, "--requests", str(args.requests),
        "--prompt-tokens", str(args.prompt_tokens), "--max-tokens", str(args.max_tokens),
        "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),
        "--torch-threads", str(args.torch_threads),
    ]  # fmt: skip
    # At normal priority: this process may be niced (--client-nice), the offline side is not.
    result = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=1800,
        preexec_fn=normal_priority,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def bundled_server(args: argparse.Namespace, engine_core: str = "process") -> Server:
    """The bundled server with the engine settings of `args` (not started), at normal priority
    with `args.torch_threads` OpenMP threads, like the offline side."""
    return Server.bundled(
        "--device", args.device, "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens), "--log-level", "warning",
        "--engine-core", engine_core, *getattr(args, "extra_server_args", ()),
        name=f"server (engine core {engine_core})",
        env={"OMP_NUM_THREADS": str(args.torch_threads)}, at_normal_priority=True,
    )  # fmt: skip


def _p99_ms(values: list[float]) -> float | None:
    """numpy's (linear) p99, as a `p99` gate and target_verdict.judge compute it."""
    return float(np.quantile(values, 0.99)) * 1e3 if values else None


def _value_ms(verdict: TargetVerdict) -> float | None:
    """A judged quantile in ms (None without samples), as the JSON has carried it."""
    return verdict.value * 1e3 if verdict.samples else None


async def run_http(url: str, prompts: list[list[int]], max_tokens: int) -> dict:
    """All prompts at once as streams, read by raw_stream's Protocol client, woken per
    RUN_WAKE_BYTES: it stands for a client on another machine, so it takes as little CPU from
    the server's cores as a client can (raw_stream.py)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)

    def body(prompt: list[int], tokens: int, seed: int) -> dict[str, Any]:
        return {"prompt": prompt, "max_tokens": tokens, "ignore_eos": True, "seed": seed,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip

    await stream_completion(host, int(port), body(prompts[0], 4, 0))  # warm-up
    before = latest_seq(url)
    # At normal priority even when the client is niced (--client-nice): a probe stands for the
    # kubelet or Prometheus, not for the load.
    prober = server_probe.launch(url, PROBE_INTERVAL_SECONDS, preexec_fn=normal_priority)
    try:
        server_probe.start(prober)
        ticks = host_steal.read()
        started = time.perf_counter()
        results = await asyncio.gather(
            *(stream_completion(host, int(port), body(p, max_tokens, i), wake_bytes=RUN_WAKE_BYTES)
              for i, p in enumerate(prompts))
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        steal = host_steal.share(ticks, host_steal.read())
    except BaseException:
        prober.kill()  # not left probing a server the benchmark is about to stop
        prober.communicate()
        raise
    probes = server_probe.stop(prober)
    steps = breakdown(fetch_steps(url, before), elapsed, len(prompts))
    health, metrics = probes["/health"], probes["/metrics"]
    tokens = sum(r["output_tokens"] for r in results)
    return {"output_tokens": tokens, "seconds": elapsed, "tokens_per_second": tokens / elapsed,
            "health_p99_ms": _p99_ms(health), "metrics_p99_ms": _p99_ms(metrics),
            "probes": len(health) + len(metrics), "steps": steps,
            "client_reads": sum(r["reads"] for r in results), "steal_share": steal,
            "health_seconds": health, "metrics_seconds": metrics}  # fmt: skip


def _values(runs: list[dict], key: str) -> list[float]:
    return [run[key] for run in runs if run.get(key) is not None]


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _steal_pct(runs: list[dict]) -> str:
    """The median and largest share of CPU time the host took over `runs` (host_steal.py)."""
    shares = sorted(_values(runs, "steal_share"))
    return f"{statistics.median(shares):.1%} ({shares[-1]:.1%})" if shares else "n/a"


TARGET_RATIO = 0.90
TARGET_PROBE_P99_MS = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="engine device (default: cpu)")
    parser.add_argument(
        "--requests", type=int, default=64, help="concurrent streams (default 64 = max_num_seqs)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=64)
    # 64 x 256 tokens: a few seconds a run, so each probe path gets enough samples for a p99.
    parser.add_argument("--max-tokens", type=int, default=256, help="output tokens per request")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--low-load-requests", type=int, default=20)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads on both sides (default 1: on a small shared CPU more "
        "threads than free cores makes OpenMP spin and steps 3-10x slower)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="rounds, each an offline and an HTTP run (default 5, the fewest whose median has "
        "95 %% bounds)",
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=0,
        help="niceness of the benchmark's HTTP client; > 0 stands in for a client on another "
        "machine (its TTFT readings then include its own scheduling delay)",
    )
    parser.add_argument(
        "--engine-core",
        choices=(*PLACEMENTS, "both"),
        default="both",
        help="server side: the engine core in a child process, in a thread, or both side by "
        "side (default)",
    )
    parser.add_argument("--offline-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(RESULTS_DIR / "server.json"))
    args = parser.parse_args()
    for name in ("requests", "prompt_tokens", "max_tokens", "max_num_seqs", "repeats",
                 "max_num_batched_tokens", "low_load_requests", "torch_threads"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.client_nice < 0:
        parser.error("--client-nice must be at least 0 (it stands for a client elsewhere)")
    try:
        config = EngineConfig(
            device=args.device,
            batching=BatchingConfig(
                max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens
            ),
        )
    except ConfigError as exc:
        parser.error(str(exc))
    prompts = workload(args.requests, args.prompt_tokens, seed=0)
    if args.offline_only:
        print(json.dumps(run_offline(config, prompts, args.max_tokens, args.torch_threads)))
        return 0
    placements = PLACEMENTS if args.engine_core == "both" else (args.engine_core,)
    offline_runs: list[dict] = []
    http_runs: dict[str, list[dict]] = {p: [] for p in placements}
    low: dict[str, dict] = {}
    with contextlib.ExitStack() as running:  # every server started is stopped on the way out
        servers: dict[str, Server] = {}
        try:
            for placement in placements:  # one by one: a failed start stops those started
                servers[placement] = running.enter_context(bundled_server(args, placement))
            if args.client_nice:
                os.nice(args.client_nice)
            # Interleaved rounds: other load on a shared machine hits every side alike, and each
            # HTTP run has an offline run beside it for the same-round ratio.
            for _ in range(args.repeats):
                offline_runs.append(run_offline_process(args))
                for placement, server in servers.items():
                    http_runs[placement].append(
                        asyncio.run(run_http(server.url, prompts, args.max_tokens))
                    )
            for placement, server in servers.items():
                low[placement] = asyncio.run(
                    run_low_load(server.url, prompts, args.low_load_requests)
                )
        except (RuntimeError, OSError, httpx.HTTPError, subprocess.CalledProcessError) as exc:
            # A server that refused the workload (e.g. --max-tokens over its cap), an offline
            # run that failed, a server gone: say which, after stopping the servers (finally).
            said = (getattr(exc, "stderr", None) or "").strip().splitlines()
            reason = said[-1] if said else str(exc)  # an offline child's own last word
            raise SystemExit(f"error: a run failed: {reason}") from None
    offline = max(offline_runs, key=lambda r: r["tokens_per_second"])
    best = {p: max(runs, key=lambda r: r["tokens_per_second"]) for p, runs in http_runs.items()}
    ratios = {p: run["tokens_per_second"] / offline["tokens_per_second"] for p, run in best.items()}
    # Each HTTP run beside the offline run of the same round: on a machine whose speed drifts
    # (this VM's offline rate ranged 5.5k-9.3k tok/s within minutes) best/best can pair runs
    # from different states, so the spread of the same-round ratios is printed beside it.
    paired = {
        p: sorted(h["tokens_per_second"] / o["tokens_per_second"]
                  for o, h in zip(offline_runs, runs, strict=True))
        for p, runs in http_runs.items()
    }  # fmt: skip
    # The targets, judged on all rounds rather than on the best pair (target_verdict.py). Probe
    # latencies of every run together: a run lasts a few seconds, so one run's p99 rests on a
    # few dozen samples (it is that run's maximum); all runs give a p99 worth the name.
    targets = {
        p: {
            "ratio_median": judge(paired[p], 0.5, TARGET_RATIO, at_least=True),
            **{f"{path}_p99": judge([v for r in runs for v in r[f"{path}_seconds"]], 0.99,
                                    TARGET_PROBE_P99_MS / 1e3, at_least=False)
               for path in ("health", "metrics")},
        }
        for p, runs in http_runs.items()
    }  # fmt: skip
    pooled = {
        p: {
            "health_p99_ms": _value_ms(t["health_p99"]),
            "metrics_p99_ms": _value_ms(t["metrics_p99"]),
            "probes_per_path": t["health_p99"].samples,
        }
        for p, t in targets.items()
    }
    result = {
        "workload": {"requests": args.requests, "prompt_tokens": args.prompt_tokens,
                     "max_tokens": args.max_tokens, "device": args.device,
                     "max_num_seqs": args.max_num_seqs, "repeats": args.repeats,
                     "torch_threads": args.torch_threads, "client_nice": args.client_nice},
        "offline": offline,
        "offline_runs": offline_runs,
        "http_streaming": best,
        "http_streaming_runs": http_runs,
        "http_to_offline_ratio": ratios,
        "http_to_offline_ratio_same_round": paired,
        "probes_all_runs": pooled,
        "targets": {p: {k: v.to_dict() for k, v in t.items()} for p, t in targets.items()},
        "target_ratio": TARGET_RATIO,
        "target_probe_p99_ms": TARGET_PROBE_P99_MS,
        "low_load_ttft": low,
        "host": host_facts(),
    }  # fmt: skip
    write_result(args.output, result)
    rows = [
        ("offline engine output tokens/s", lambda p: f"{offline['tokens_per_second']:.1f}"),
        ("HTTP streaming output tokens/s", lambda p: f"{best[p]['tokens_per_second']:.1f}"),
        ("HTTP / offline, best / best", lambda p: f"{ratios[p]:.3f}"),
        ("same-round ratios: min-max", lambda p: f"{paired[p][0]:.2f}-{paired[p][-1]:.2f}"),
        (f"  median [one-sided 95% bounds] (>= {TARGET_RATIO:.2f})",
         lambda p: targets[p]["ratio_median"].cell()),
        ("output tokens per run", lambda p: f"{best[p]['output_tokens']}"),
        # Time the hypervisor took from the VM's CPUs during each run (host_steal.py).
        ("host steal, offline runs: median (max)", lambda p: _steal_pct(offline_runs)),
        ("host steal, HTTP runs: median (max)", lambda p: _steal_pct(http_runs[p])),
        # The best runs' wall time split by their step records (step_breakdown.py).
        ("engine steps, offline / HTTP", lambda p: side_by_side(offline, best[p], "steps", "{:d}")),
        ("forward ms per full step, offline / HTTP",
         lambda p: side_by_side(offline, best[p], "full_step_forward_ms_median", "{:.2f}")),
        ("s between steps, offline / HTTP",
         lambda p: side_by_side(offline, best[p], "between_steps_seconds", "{:.3f}")),
        ("s before first + after last step, off / HTTP",
         lambda p: side_by_side(offline, best[p], "edges_seconds", "{:.3f}")),
        # Pooled over all runs, with 95 % bounds, against the target (target_verdict.py).
        (f"/health p99 under load, ms (<= {TARGET_PROBE_P99_MS:g})",
         lambda p: targets[p]["health_p99"].cell(1e3, 2)),
        (f"/metrics p99 under load, ms (<= {TARGET_PROBE_P99_MS:g})",
         lambda p: targets[p]["metrics_p99"].cell(1e3, 2)),
        ("probes per path, all runs", lambda p: f"{pooled[p]['probes_per_path']}"),
        ("/health, /metrics worst run's p99 (ms)",
         lambda p: "{}, {}".format(
             _fmt(max(_values(http_runs[p], "health_p99_ms"), default=None)),
             _fmt(max(_values(http_runs[p], "metrics_p99_ms"), default=None)))),
        ("low-load client TTFT mean (ms)",
         lambda p: f"{low[p]['client_ttft_mean_seconds'] * 1e3:.2f}"),
        ("low-load client TTFT p50 (ms)",
         lambda p: f"{low[p]['client_ttft_p50_seconds'] * 1e3:.2f}"),
        ("low-load server TTFT mean (ms)",
         lambda p: f"{low[p]['server_ttft_mean_seconds'] * 1e3:.2f}"),
        ("HTTP stack cost: client - server (ms)",
         lambda p: f"{low[p]['http_overhead_mean_seconds'] * 1e3:.2f}"),
    ]  # fmt: skip
    print_table(
        ("measure", *(f"engine core {p}" for p in placements)),
        ((name, *(cell(p) for p in placements)) for name, cell in rows),
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
