"""The issue-2 engine benchmark: one seeded mixed-lengths workload (70% short outputs, 30% long)
driven offline through Engine.add_request / Engine.step() under the continuous, dynamic and
static policies side by side, plus (when transformers is installed) the same model through
transformers' continuous batching and padded generate, and behind `transformers serve
--continuous-batching` over loopback HTTP (both phases). Prints a table, writes JSON.

    .venv/bin/python -m benchmarks.bench_engine [--requests 192] [--arrival-rate 10] [--no-hf]

Two phases over the same requests (same prompts and lengths, same order for every policy):
- capacity: every request arrives at t=0 (an offline burst, as in vLLM's throughput benchmark),
  so output tokens/s is what each policy can do, not the arrival rate, and continuous runs at
  its 64-sequence limit. Throughput, KV, overhead and transformers-peer numbers come from here.
- latency: Poisson arrivals at --arrival-rate requests/s (default 10, about the continuous
  policy's capacity on this 2-core box: ~1700 tokens/s / ~176 output tokens per request),
  honoured against the clock. Short-request completion latency (finish - arrival) comes from
  here; in the burst it mostly measures the FIFO queue every policy shares.
A measurement script, not a test: it reports whether targets are met and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.hf_peer import HFRequest, build_hf_model, run_hf_continuous, run_hf_padded
from benchmarks.serve_peer import serve_rows
from reference_server import Engine, EngineConfig, SamplingParams
from reference_server.config import BatchingConfig, ClassConfig
from reference_server.model_runner import auto_num_threads

RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"


@dataclass(frozen=True, slots=True)
class Request:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    arrival_seconds: float  # offset from the run's start
    is_short: bool


def make_workload(args: argparse.Namespace, arrival_rate: float) -> list[Request]:
    """The same requests for any rate (lengths and prompts from one seeded stream, arrival gaps
    from another); arrival_rate 0 = all at t=0."""
    rng = random.Random(args.seed)
    arrivals = random.Random(args.seed + 1)
    requests, clock = [], 0.0
    for i in range(args.requests):
        is_short = rng.random() >= args.long_fraction
        if arrival_rate > 0:
            clock += arrivals.expovariate(arrival_rate)
        prompt_len = rng.randint(args.prompt_min_tokens, args.prompt_max_tokens)
        requests.append(
            Request(
                request_id=f"r{i}",
                prompt_token_ids=[rng.randrange(256) for _ in range(prompt_len)],
                max_tokens=args.short_tokens if is_short else args.long_tokens,
                arrival_seconds=clock,
                is_short=is_short,
            )
        )
    return requests


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _engine_config(args: argparse.Namespace, policy: str) -> EngineConfig:
    batch_size = args.max_num_seqs  # dynamic / static batches as large as continuous's limit
    cls = ClassConfig(
        max_waiting=args.requests + 8, max_batch_size=batch_size, max_wait_ms=args.max_wait_ms
    )
    return EngineConfig(
        model=args.model,
        device="cpu",
        seed=args.seed,
        max_model_len=2048,
        torch_num_threads=args.threads,
        batching=BatchingConfig(
            policy=policy,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            interactive=cls,
            batch=cls,
        ),
    )


def _warm_up(engine: Engine) -> None:
    """First forwards pay one-off allocator / kernel-selection costs; keep them out of timing."""
    for i in range(4):
        engine.add_request(f"warm{i}", [65 + i] * 40, SamplingParams(max_tokens=8, temperature=0))
    for _ in range(1000):
        if not engine.has_unfinished():
            break
        wakeup = engine.next_wakeup_seconds()
        if wakeup:  # a dynamic window is open: wait for it rather than spin
            time.sleep(wakeup)
        engine.step()
    else:
        raise RuntimeError("warm-up requests did not finish")
    engine.block_manager.reset_peak()


def run_policy(args: argparse.Namespace, policy: str, workload: list[Request]) -> dict:
    engine = Engine(_engine_config(args, policy))
    try:
        _warm_up(engine)
        return _drive(engine, policy, workload)
    finally:
        engine.close()


def _drive(engine: Engine, policy: str, workload: list[Request]) -> dict:
    by_id = {r.request_id: r for r in workload}
    finish: dict[str, float] = {}
    num_output_tokens = 0
    step_seconds = outside_seconds = 0.0
    step_seconds_64 = outside_seconds_64 = 0.0
    num_steps = num_steps_64 = 0
    max_running = 0
    next_index = 0
    start = time.monotonic()
    cpu_start = time.process_time()
    # Bounded: every request finishes in at most max_tokens steps once admitted, so this caps
    # a runaway loop far above any real run.
    for _ in range(10_000_000):
        now = time.monotonic()
        while next_index < len(workload) and workload[next_index].arrival_seconds <= now - start:
            r = workload[next_index]
            engine.add_request(
                r.request_id,
                r.prompt_token_ids,
                SamplingParams(max_tokens=r.max_tokens, temperature=0.0),
                arrival_time=start + r.arrival_seconds,
            )
            next_index += 1
        if not engine.has_unfinished():
            if next_index >= len(workload):
                break
            time.sleep(max(0.0, start + workload[next_index].arrival_seconds - now))
            continue
        wakeup = engine.next_wakeup_seconds()
        if wakeup is None or wakeup > 0.0:
            # Nothing runnable now (a dynamic window is open): sleep to the sooner of the window
            # and the next arrival.
            until = [] if wakeup is None else [wakeup]
            if next_index < len(workload):
                until.append(start + workload[next_index].arrival_seconds - now)
            time.sleep(max(0.0, min(until)) if until else 0.0)
            if until:
                continue
        result = engine.step()
        done = time.monotonic()
        for out in result.outputs:
            num_output_tokens += len(out.new_token_ids)
            if out.finished:
                finish[out.request_id] = done
        record = result.record
        if record is None:
            continue
        num_steps += 1
        step_seconds += record.duration_seconds
        outside_seconds += record.duration_seconds - record.forward_seconds
        running = sum(record.num_running.values())
        max_running = max(max_running, running)
        if running >= 64:
            num_steps_64 += 1
            step_seconds_64 += record.duration_seconds
            outside_seconds_64 += record.duration_seconds - record.forward_seconds
    else:
        raise RuntimeError("benchmark loop bound reached")
    cpu_seconds = time.process_time() - cpu_start
    wall = max(finish.values()) - start
    short = [finish[i] - (start + r.arrival_seconds) for i, r in by_id.items() if r.is_short]
    long_ = [finish[i] - (start + r.arrival_seconds) for i, r in by_id.items() if not r.is_short]
    bm = engine.block_manager.stats()
    stats = engine.stats()
    expected_tokens = sum(r.max_tokens for r in workload)
    return {
        "name": policy,
        "output_tokens": num_output_tokens,
        "expected_output_tokens": expected_tokens,
        "wall_seconds": wall,
        "output_tokens_per_second": num_output_tokens / wall,
        # Process CPU time: less sensitive than wall time to the other load on a shared box.
        "cpu_seconds": cpu_seconds,
        "short_p50_s": _percentile(short, 0.50),
        "short_p99_s": _percentile(short, 0.99),
        "long_p50_s": _percentile(long_, 0.50),
        "kv_blocks_total": bm.num_blocks_total,
        "kv_blocks_peak": bm.num_blocks_peak,
        "kv_peak_usage_pct": 100.0 * bm.peak_usage_ratio,
        "kv_unused_slots_at_peak_pct": 100.0 * bm.unused_slots_ratio_at_peak,
        "num_steps": num_steps,
        "mean_step_ms": 1000.0 * step_seconds / max(1, num_steps),
        "scheduler_overhead_pct": 100.0 * outside_seconds / max(1e-12, step_seconds),
        "num_steps_at_64_running": num_steps_64,
        "scheduler_overhead_at_64_pct": (
            100.0 * outside_seconds_64 / step_seconds_64 if num_steps_64 else None
        ),
        "max_running": max_running,
        "preemptions": stats.num_preemptions_total,
        "recomputed_tokens": stats.num_recomputed_tokens_total,
    }


def run_hf(args: argparse.Namespace, workload: list[Request], num_blocks: int) -> list[dict]:
    try:
        import transformers
    except ImportError:
        print("transformers not installed (pip install -e '.[bench]'): HF peer skipped")
        return []
    requests = [
        HFRequest(r.prompt_token_ids, r.max_tokens, r.is_short, r.arrival_seconds) for r in workload
    ]
    model = build_hf_model(args.model, args.seed, 2048)
    rows = []
    for name, run in (
        (
            "hf continuous",
            lambda: run_hf_continuous(
                model,
                requests,
                max_num_seqs=args.max_num_seqs,
                block_size=16,
                num_blocks=num_blocks,
            ),
        ),
        ("hf padded", lambda: run_hf_padded(model, requests, batch_size=args.max_num_seqs)),
    ):
        try:
            row = run()
        except Exception as exc:  # report precisely why a peer could not run, keep the others
            row = {"name": name, "error": f"{type(exc).__name__}: {exc}"}
        row["transformers_version"] = transformers.__version__
        rows.append(row)
    return rows


def _fmt(value: object, spec: str) -> str:
    width = "".join(ch for ch in spec.split(".")[0] if ch.isdigit())
    return format("-", f">{width}") if value is None else format(value, spec)


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'run':<40} {'tok/s':>8} {'wall s':>7} {'cpu s':>6} {'short p50':>9} {'short p99':>9} "
        f"{'KV peak%':>8} {'unused%':>7} {'sched%':>6} {'@64%':>6} {'steps':>6} {'preempt':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<40} ERROR {row['error']}")
            continue
        print(
            f"{row['name']:<40} {row['output_tokens_per_second']:>8.0f} "
            f"{row['wall_seconds']:>7.1f} {_fmt(row.get('cpu_seconds'), '6.1f')} "
            f"{_fmt(row.get('short_p50_s'), '9.2f')} "
            f"{_fmt(row.get('short_p99_s'), '9.2f')} "
            f"{_fmt(row.get('kv_peak_usage_pct'), '8.1f')} "
            f"{_fmt(row.get('kv_unused_slots_at_peak_pct'), '7.2f')} "
            f"{_fmt(row.get('scheduler_overhead_pct'), '6.1f')} "
            f"{_fmt(row.get('scheduler_overhead_at_64_pct'), '6.1f')} "
            f"{_fmt(row.get('num_steps'), '6d')} {_fmt(row.get('preemptions'), '7d')}"
        )


def targets(rows: dict[str, dict]) -> list[dict]:
    """Throughput, KV and overhead targets from the capacity phase (saturated: tokens/s is what
    the policy can do); the short-request p99 target from the latency phase (Poisson)."""
    cont, static = rows.get("capacity continuous"), rows.get("capacity static")
    lat_cont, lat_static = rows.get("latency continuous"), rows.get("latency static")
    hf = rows.get("capacity hf continuous (generate_batch manager)")
    checks = []

    def check(name: str, value: float | None, goal: float, higher_is_better: bool = True):
        ok = None if value is None else (value >= goal if higher_is_better else value <= goal)
        checks.append({"target": name, "value": value, "goal": goal, "met": ok})

    if cont and static:
        check(
            "capacity: continuous / static tokens/s >= 2",
            cont["output_tokens_per_second"] / static["output_tokens_per_second"],
            2.0,
        )
        check(
            "capacity: continuous / static tokens per CPU-s >= 2",
            static["cpu_seconds"] / cont["cpu_seconds"],
            2.0,
        )
        check(
            "capacity: static / continuous short p99 >= 5",
            static["short_p99_s"] / cont["short_p99_s"],
            5.0,
        )
    if lat_cont and lat_static:
        check(
            "latency: static / continuous short p99 >= 5",
            lat_static["short_p99_s"] / lat_cont["short_p99_s"],
            5.0,
        )
    if cont and hf and "error" not in hf:
        check(
            "capacity: continuous / hf continuous tokens/s >= 3",
            cont["output_tokens_per_second"] / hf["output_tokens_per_second"],
            3.0,
        )
    if cont:
        check(
            "capacity: KV unused slots at peak % <= 4",
            cont["kv_unused_slots_at_peak_pct"],
            4.0,
            False,
        )
        check(
            "capacity: scheduler overhead at 64 running % <= 5",
            cont["scheduler_overhead_at_64_pct"],
            5.0,
            False,
        )
    return checks


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--requests", type=int, default=192)
    p.add_argument("--long-fraction", type=float, default=0.3)
    p.add_argument("--short-tokens", type=int, default=32)
    p.add_argument("--long-tokens", type=int, default=512)
    p.add_argument("--prompt-min-tokens", type=int, default=16)
    p.add_argument("--prompt-max-tokens", type=int, default=64)
    p.add_argument(
        "--arrival-rate",
        type=float,
        default=10.0,
        help="latency phase Poisson rate, requests/s (0 = skip the latency phase)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--max-wait-ms", type=float, default=50.0, help="dynamic policy window")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: auto)")
    p.add_argument("--policies", default="continuous,dynamic,static")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers peers")
    p.add_argument(
        "--no-serve", action="store_true", help="skip the `transformers serve` peer (HTTP)"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.requests < 1 or not 0 <= args.long_fraction <= 1 or args.arrival_rate < 0:
        p.error("--requests >= 1, --long-fraction in [0, 1], --arrival-rate >= 0")
    if not 1 <= args.prompt_min_tokens <= args.prompt_max_tokens:
        p.error("need 1 <= --prompt-min-tokens <= --prompt-max-tokens")
    for policy in args.policies.split(","):
        if policy not in ("continuous", "dynamic", "static"):
            p.error(f"unknown policy {policy!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = args.threads if args.threads is not None else auto_num_threads("cpu")
    burst = make_workload(args, 0.0)
    load_before = os.getloadavg()
    print(
        f"workload: {len(burst)} requests ({sum(r.is_short for r in burst)} short x "
        f"{args.short_tokens}, {sum(not r.is_short for r in burst)} long x "
        f"{args.long_tokens} tokens, prompts {args.prompt_min_tokens}-{args.prompt_max_tokens}); "
        f"model {args.model}, torch threads {threads}, load average {load_before[0]:.2f}\n"
        f"capacity phase: all at t=0; latency phase: Poisson {args.arrival_rate}/s"
    )
    phases = [("capacity", burst)]
    if args.arrival_rate > 0:
        phases.append(("latency", make_workload(args, args.arrival_rate)))
    rows: dict[str, dict] = {}
    for phase, workload in phases:
        for policy in args.policies.split(","):
            row = run_policy(args, policy, workload)
            row["name"] = f"{phase} {policy}"
            rows[row["name"]] = row
            print(f"  {row['name']}: {row['wall_seconds']:.1f} s", flush=True)
        if phase == "capacity" and not args.no_hf:
            torch.set_num_threads(threads)
            num_blocks = next(iter(rows.values()))["kv_blocks_total"]
            for row in run_hf(args, workload, num_blocks):
                row["name"] = f"{phase} {row['name']}"
                rows[row["name"]] = row
                print(f"  {row['name']}: {row.get('wall_seconds', 'error')} s", flush=True)
    if not args.no_hf and not args.no_serve:
        num_blocks = next(iter(rows.values()))["kv_blocks_total"]
        for phase, row in serve_rows(args.model, args.seed, phases, num_blocks).items():
            row["name"] = f"{phase} transformers serve (HTTP)"
            rows[row["name"]] = row
            print(f"  {row['name']}: {row.get('wall_seconds', 'error')} s", flush=True)
    load_after = os.getloadavg()
    print()
    print_table(list(rows.values()))
    checks = targets(rows)
    print()
    for c in checks:
        verdict = {True: "met", False: "MISSED", None: "n/a"}[c["met"]]
        print(f"  {c['target']:<52} {_fmt(c['value'], '.2f'):>8}  {verdict}")
    print(f"load average 1m: {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    report = {
        "workload": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "torch_num_threads": threads,
        "torch_version": torch.__version__,
        "cpu": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": [load_before[0], load_after[0]],
        "rows": list(rows.values()),
        "targets": checks,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
