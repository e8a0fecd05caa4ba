"""Low load: client-measured against server-measured TTFT, one request at a time.

bench_server.py's third part. Each request is sent alone as a streamed completion through httpx,
reading raw bytes (woken per chunk, unlike raw_stream's throughput client, so that it can time
the first token). Client TTFT = request sent -> first chunk with text; server TTFT = the
server's batchgate_ttft_seconds histogram (interactive): its sum / count over the same window.
The difference is what the HTTP stack (both ends) adds to a lone user's first token.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.raw_stream import has_content

__all__ = ["run_low_load"]


async def stream_one(
    http: httpx.AsyncClient, prompt: list[int], max_tokens: int, seed: int
) -> dict[str, Any]:
    """One streamed request through httpx, woken per chunk so that it can time the first text;
    it reads raw bytes and decodes only the usage chunk."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "seed": seed,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    sent = time.perf_counter()
    first = None
    tail = b""
    async with http.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for data in response.aiter_raw():
            if first is None and has_content(data):
                first = time.perf_counter()
            tail = (tail + data)[-4096:]
    usage = None
    for line in reversed(tail.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage":{' in line:
            usage = json.loads(line[6:])["usage"]
            break
    done = time.perf_counter()
    return {"sent": sent, "first": first, "done": done,
            "output_tokens": usage["completion_tokens"] if usage else 0}  # fmt: skip


def ttft_histogram(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "batchgate_ttft_seconds":
            for sample in family.samples:
                if sample.labels.get("priority") == "interactive":
                    if sample.name.endswith("_sum"):
                        total = sample.value
                    elif sample.name.endswith("_count"):
                        count = sample.value
    return total, count


async def run_low_load(url: str, prompts: list[list[int]], count: int) -> dict:
    sum0, count0 = ttft_histogram(url)
    client_ttfts = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for index in range(count):
            result = await stream_one(http, prompts[index % len(prompts)], 8, index)
            if result["first"] is None:
                raise SystemExit(f"low-load request {index}: the stream had no text chunk")
            client_ttfts.append(result["first"] - result["sent"])
    sum1, count1 = ttft_histogram(url)
    server_mean = (sum1 - sum0) / max(1.0, count1 - count0)
    client_mean = statistics.fmean(client_ttfts)
    return {
        "requests": count,
        "client_ttft_mean_seconds": client_mean,
        "client_ttft_p50_seconds": statistics.median(client_ttfts),
        "server_ttft_mean_seconds": server_mean,
        "http_overhead_mean_seconds": client_mean - server_mean,
    }
