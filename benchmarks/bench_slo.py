"""The slo policy against continuous on a workload where long prompts arrive among decoding
requests: time between tokens (ITL) p99, output tokens/s, and the long prompts' TTFT.

Run: .venv/bin/python -m benchmarks.bench_slo [--phase-seconds 20] [--rounds 2]

One bundled server (the `small` model preset by default, one torch thread). Closed-loop decode
streams (--streams, short prompts, --decode-tokens output tokens each, ignore_eos) run all along;
long prompts (--long-prompt-tokens, >= 1000) arrive as a Poisson stream (--long-rate per second)
with a few output tokens each. Phases alternate on the same server, switched live through
PUT /admin/batching: continuous (the default token budget), then slo with slo_target_ms set to
half of the first continuous phase's step-duration p99, and so on for --rounds rounds, so that
whatever else the machine does hits both policies alike. Per phase:

- ITL p99 (server): p99 of the gaps between consecutive step starts, over steps that decoded:
  the time a running request waits between two of its tokens, from the server's own step records
  (GET /admin/steps), free of the client's scheduling noise. Client chunk gaps are listed too.
- step p99: the steps' own durations (what the target is set from).
- output tokens/s: the server's batchgate_generation_tokens_total over the phase.
- long-prompt TTFT p50/p99: client-measured, sent -> first streamed content.

Targets (issue 13): slo's ITL p99 <= 1.2x its target, its output tokens/s >= 0.85x continuous's,
and the long-prompt TTFT growth stated. Prints a table and writes benchmarks/results/slo.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import sys
import time
from typing import Any

import httpx

from benchmarks.bench_server import bundled_server
from benchmarks.harness import RESULTS_DIR, host_facts, print_table, write_result


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _content_chunks(data: bytes) -> int:
    """SSE events in `data` that carry non-empty text (role / empty / usage chunks do not)."""
    count = 0
    start = 0
    while (index := data.find(b'"text":"', start)) >= 0:
        if data[index + 8 : index + 9] not in (b'"', b""):
            count += 1
        start = index + 8
    return count


async def stream(http: httpx.AsyncClient, prompt: list[int], max_tokens: int, seed: int) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "seed": seed,
            "stream": True}  # fmt: skip
    sent = time.monotonic()
    chunk_times: list[float] = []
    async with http.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for data in response.aiter_raw():
            now = time.monotonic()
            chunk_times.extend([now] * _content_chunks(data))
    return {"sent": sent, "chunk_times": chunk_times}


class Workload:
    """Decode streams plus Poisson long prompts, recording into the phase that is current."""

    def __init__(self, http: httpx.AsyncClient, args: argparse.Namespace) -> None:
        self.http = http
        self.args = args
        self.rng = random.Random(args.seed)
        self.phase: dict[str, Any] | None = None
        self.stopping = False

    def _prompt(self, tokens: int) -> list[int]:
        return [self.rng.randrange(32, 127) for _ in range(tokens)]

    async def decode_loop(self, index: int) -> None:
        n = 0
        while not self.stopping:
            n += 1
            result = await stream(
                self.http, self._prompt(32), self.args.decode_tokens, index * 100_000 + n
            )
            phase = self.phase
            times = result["chunk_times"]
            if phase is not None:
                phase["chunk_gaps"].extend(
                    b - a for a, b in itertools.pairwise(times) if a >= phase["t0"]
                )

    async def long_loop(self) -> None:
        tasks = set()
        n = 0
        while not self.stopping:
            await asyncio.sleep(self.rng.expovariate(self.args.long_rate))
            if self.stopping:
                break
            n += 1
            task = asyncio.create_task(self._one_long(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _one_long(self, n: int) -> None:
        phase = self.phase
        result = await stream(
            self.http, self._prompt(self.args.long_prompt_tokens), self.args.long_output_tokens, n
        )
        if phase is not None and phase is self.phase and result["chunk_times"]:
            phase["long_ttfts"].append(result["chunk_times"][0] - result["sent"])


def _metric(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"{name} not in /metrics")


def _steps_since(http: httpx.Client, after: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    while True:
        page = http.get("/admin/steps", params={"after": after, "limit": 10000}).json()
        if page["missed"]:
            raise RuntimeError(f"{page['missed']} step records lost: raise --step-log-size")
        records.extend(page["records"])
        if not page["records"]:
            return records
        after = page["records"][-1]["seq"]


def _phase_summary(
    steps: list[dict[str, Any]], phase: dict[str, Any], tokens: float, seconds: float
) -> dict[str, Any]:
    intervals = [
        b["start_time"] - a["start_time"]
        for a, b in itertools.pairwise(steps)
        if a["num_decode_tokens"] > 0
    ]
    durations = [s["duration_seconds"] for s in steps]
    predicted = [
        (s["duration_seconds"], s["predicted_seconds"])
        for s in steps
        if s.get("predicted_seconds") is not None
    ]
    return {
        "steps": len(steps),
        "itl_p99_ms": _p(intervals, 0.99) * 1e3,
        "itl_p50_ms": _p(intervals, 0.50) * 1e3,
        "step_p99_ms": _p(durations, 0.99) * 1e3,
        "client_chunk_gap_p99_ms": _p(phase["chunk_gaps"], 0.99) * 1e3,
        "output_tokens_per_second": tokens / seconds,
        "long_prompts": len(phase["long_ttfts"]),
        "long_ttft_p50_ms": _p(phase["long_ttfts"], 0.50) * 1e3,
        "long_ttft_p99_ms": _p(phase["long_ttfts"], 0.99) * 1e3,
        "max_prefill_tokens_per_step": max((s["num_prefill_tokens"] for s in steps), default=0),
        "prediction_mean_abs_error_ms": (
            statistics.fmean(abs(a - p) for a, p in predicted) * 1e3 if predicted else None
        ),
    }


async def run(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=args.streams + 64)
    phases: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        work = Workload(http, args)
        loops = [asyncio.create_task(work.decode_loop(i)) for i in range(args.streams)]
        loops.append(asyncio.create_task(work.long_loop()))
        sync = httpx.Client(base_url=url, timeout=30)
        await asyncio.sleep(args.warmup_seconds)
        target_ms: float | None = None
        for round_index in range(args.rounds):
            for policy in ("continuous", "slo"):
                change: dict[str, Any] = {"policy": policy}
                if policy == "slo":
                    assert target_ms is not None
                    change["slo_target_ms"] = target_ms
                sync.put("/admin/batching", json=change).raise_for_status()
                await asyncio.sleep(args.settle_seconds)  # the cost model learns here
                after = sync.get("/admin/steps", params={"after": 0, "limit": 1}).json()
                first_seq = after["latest_seq"]
                tokens0 = _metric(sync, "batchgate_generation_tokens_total")
                phase = {"t0": time.monotonic(), "chunk_gaps": [], "long_ttfts": []}
                work.phase = phase
                steps: list[dict[str, Any]] = []
                end = phase["t0"] + args.phase_seconds
                while (left := end - time.monotonic()) > 0:
                    # Polled each second: the server keeps only its last 4096 step records.
                    await asyncio.sleep(min(1.0, left))
                    last = steps[-1]["seq"] if steps else first_seq
                    steps += await asyncio.to_thread(_steps_since, sync, last)
                work.phase = None
                seconds = time.monotonic() - phase["t0"]
                tokens = _metric(sync, "batchgate_generation_tokens_total") - tokens0
                summary = _phase_summary(steps, phase, tokens, seconds)
                summary.update(policy=policy, round=round_index + 1, target_ms=change.get(
                    "slo_target_ms"))  # fmt: skip
                if target_ms is None:
                    target_ms = round(summary["step_p99_ms"] / 2.0, 2)
                phases.append(summary)
                print(json.dumps(summary), flush=True)
        work.stopping = True
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        sync.close()
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--streams", type=int, default=16, help="closed-loop decode streams")
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--long-prompt-tokens", type=int, default=1200)
    parser.add_argument("--long-output-tokens", type=int, default=8)
    parser.add_argument("--long-rate", type=float, default=1.0, help="long prompts per second")
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--settle-seconds", type=float, default=3.0)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        default="small",
        help="model preset (default small: on a CPU its prefill costs enough next to a decode "
        "step that the step time is the budget's to shape; on tiny a decode-only step's own "
        "noise is already half the continuous step p99)",
    )
    parser.add_argument(
        "--max-prefill-chunk-tokens",
        type=int,
        default=512,
        help="largest prefill chunk of one request per step (the server's default 512)",
    )
    parser.add_argument("--output", default=str(RESULTS_DIR / "slo.json"))
    args = parser.parse_args()
    # bench_server.bundled_server's knobs: the defaults' budget, one torch thread.
    args.max_num_seqs, args.max_num_batched_tokens, args.torch_threads = 64, 2048, 1
    args.extra_server_args = (
        "--model",
        args.model,
        "--max-prefill-chunk-tokens",
        str(args.max_prefill_chunk_tokens),
        "--step-log-size",
        "65536",
    )
    with bundled_server(args) as server:
        phases = asyncio.run(run(server.url, args))
    by_policy = {p: [x for x in phases if x["policy"] == p] for p in ("continuous", "slo")}

    def mean(policy: str, key: str) -> float:
        return statistics.fmean(x[key] for x in by_policy[policy])

    target = by_policy["slo"][0]["target_ms"]
    verdict = {
        "target_ms": target,
        "slo_itl_p99_over_target": mean("slo", "itl_p99_ms") / target,
        "slo_tokens_per_second_over_continuous": mean("slo", "output_tokens_per_second")
        / mean("continuous", "output_tokens_per_second"),
        "long_ttft_p99_slo_over_continuous": mean("slo", "long_ttft_p99_ms")
        / mean("continuous", "long_ttft_p99_ms"),
    }
    result = {
        "workload": {k: v for k, v in vars(args).items() if k != "output"},
        "phases": phases,
        "verdict": verdict,
        "targets": {"slo_itl_p99_over_target": "<= 1.2",
                    "slo_tokens_per_second_over_continuous": ">= 0.85"},
        "host": host_facts(),
    }  # fmt: skip
    write_result(args.output, result)
    header = (
        "round", "policy", "target ms", "ITL p50", "ITL p99", "step p99", "client gap p99",
        "out tok/s", "long TTFT p50", "long TTFT p99", "longs", "max prefill/step",
    )  # fmt: skip
    print_table(header, ([
        str(x["round"]), x["policy"], f"{x['target_ms'] or '-'}", f"{x['itl_p50_ms']:.1f}",
        f"{x['itl_p99_ms']:.1f}", f"{x['step_p99_ms']:.1f}",
        f"{x['client_chunk_gap_p99_ms']:.1f}", f"{x['output_tokens_per_second']:.0f}",
        f"{x['long_ttft_p50_ms']:.0f}", f"{x['long_ttft_p99_ms']:.0f}",
        str(x["long_prompts"]), str(x["max_prefill_tokens_per_step"]),
    ] for x in phases))  # fmt: skip
    print(
        f"slo ITL p99 / target: {verdict['slo_itl_p99_over_target']:.2f} (target <= 1.2); "
        f"slo / continuous output tokens/s: "
        f"{verdict['slo_tokens_per_second_over_continuous']:.3f} (target >= 0.85); "
        f"long-prompt TTFT p99 slo / continuous: "
        f"{verdict['long_ttft_p99_slo_over_continuous']:.2f}"
    )
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
