"""Issue 15's engine-side probes against the reference server, on loopback only: the largest
valid embedding request beside a completion (items 3 and 4) and extreme batching settings
(item 8). Companion of bench_hostile_clients.py (the HTTP-side probes).

Run: .venv/bin/python -m benchmarks.bench_engine_probes [--repo DIR] [--out FILE]
(--repo: the checkout whose server to start, e.g. a `git worktree` of the old code.)

3/4. embedding: POST /v1/embeddings with 128 inputs x 2,047 tokens; 0.5 s later a 4-token
     completion; meanwhile /health and /metrics every 50 ms and the RSS of the server's process
     tree every 50 ms. Reports the embedding's time and status, the completion's latency,
     /health and /metrics worst latency, and RSS growth over the idle server.
8.   settings: PUT /admin/batching with max_num_seqs, max_num_batched_tokens and
     max_prefill_chunk_tokens = 10^9 (status); if accepted, 30 prompts of 1,400 tokens at once
     and the longest step and RSS growth that follow.
Prints a table; writes benchmarks/results/engine_probes.json (or --out).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_hostile_clients import start_server
from benchmarks.harness import REPO_ROOT, RESULTS_DIR, Server, print_table, write_result


class Watch:
    """/health and /metrics latency and tree RSS, every 50 ms, on a thread."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.worst = {"/health": 0.0, "/metrics": 0.0}
        self.rss_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        with httpx.Client(base_url=self.server.url, timeout=60) as http:
            while not self._stop.wait(0.05):
                self.rss_peak = max(self.rss_peak, self.server.tree_rss_bytes())
                for path in self.worst:
                    sent = time.monotonic()
                    try:
                        http.get(path)
                    except httpx.HTTPError:
                        continue
                    self.worst[path] = max(self.worst[path], time.monotonic() - sent)


def probe_embedding(repo: Path) -> dict[str, Any]:
    server = start_server(repo, ["--max-model-len", "2048", "--max-body-bytes", str(8 * 2**20)])
    try:
        baseline = server.tree_rss_bytes()
        inputs = [[1 + (i * 7 + j) % 250 for j in range(2047)] for i in range(128)]
        result: dict[str, Any] = {}

        def embed() -> None:
            sent = time.monotonic()
            with httpx.Client(base_url=server.url, timeout=600) as http:
                response = http.post("/v1/embeddings", json={"input": inputs})
            result["embedding_status"] = response.status_code
            result["embedding_seconds"] = round(time.monotonic() - sent, 2)

        with Watch(server) as watch:
            worker = threading.Thread(target=embed)
            worker.start()
            time.sleep(0.5)
            sent = time.monotonic()
            with httpx.Client(base_url=server.url, timeout=600) as http:
                body = {"prompt": "hi", "max_tokens": 4, "ignore_eos": True}
                completion = http.post("/v1/completions", json=body)
            result["completion_status"] = completion.status_code
            result["completion_seconds"] = round(time.monotonic() - sent, 2)
            worker.join(600)
        result["health_worst_seconds"] = round(watch.worst["/health"], 3)
        result["metrics_worst_seconds"] = round(watch.worst["/metrics"], 3)
        result["rss_idle_mb"] = round(baseline / 2**20)
        result["rss_peak_mb"] = round(watch.rss_peak / 2**20)
        result["server_alive_after"] = server.alive
        return result
    finally:
        server.stop()


def probe_settings(repo: Path) -> dict[str, Any]:
    server = start_server(repo, ["--max-model-len", "2048", "--max-body-bytes", str(8 * 2**20)])
    try:
        huge = 10**9
        with httpx.Client(base_url=server.url, timeout=600) as http:
            response = http.put(
                "/admin/batching",
                json={"max_num_seqs": huge, "max_num_batched_tokens": huge,
                      "max_prefill_chunk_tokens": huge},
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            result: dict[str, Any] = {"put_status": response.status_code,
                                      "put_message": response.text[:200]}  # fmt: skip
            if response.status_code != 200:
                return result
            baseline = server.tree_rss_bytes()
            after = http.get("/admin/steps", params={"after": 0}).json()["latest_seq"]
            with Watch(server) as watch:
                threads = [
                    threading.Thread(target=lambda i=i: httpx.post(
                        server.url + "/v1/completions", timeout=600,
                        json={"prompt": [1 + (i + j) % 250 for j in range(1400)],
                              "max_tokens": 1}))
                    for i in range(30)
                ]  # fmt: skip
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(600)
            steps = http.get("/admin/steps", params={"after": after}).json()["records"]
            result["longest_step_seconds"] = round(max(s["duration_seconds"] for s in steps), 2)
            result["largest_step_tokens"] = max(s["num_prefill_tokens"] for s in steps)
            result["rss_growth_mb"] = round((watch.rss_peak - baseline) / 2**20)
            return result
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO_ROOT)
    parser.add_argument("--out", default=str(RESULTS_DIR / "engine_probes.json"))
    args = parser.parse_args()
    results = {"repo": str(args.repo), "3_4": probe_embedding(args.repo),
               "8": probe_settings(args.repo)}  # fmt: skip
    write_result(args.out, results)
    print_table(
        ("probe", "measure", "value"),
        ((probe, key, value) for probe in ("3_4", "8") for key, value in results[probe].items()),
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
