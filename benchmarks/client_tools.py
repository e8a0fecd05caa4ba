"""Third-party load generators as bench_clients.py runs them: command lines and result readers.

Owns, per client tool (guidellm, AIPerf, inference-perf, the `openai` SDK, plain Locust over
loadgen's locustfile, and a second `batchgate load` as the A/A control), the command that runs
it against one OpenAI-compatible URL at a rate, its variants for capturing request bodies
(chat/completions, stream or not, the tool's bare defaults), and the reader that takes the
tool's own output files to a `ToolResult` (request and error counts, median TTFT and median
ITL, and which ITL definition the tool reports). It does not schedule runs or compare
(bench_clients.py); the records it reads for Locust and the A/A row go through
record_medians.py, the gate's formulas.

ITL definitions (DESIGN §5 crosswalk): guidellm `inter_token_latency_ms` and AIPerf
`inter_token_latency` are per request (last token - first token) / (tokens - 1): our TPOT.
inference-perf `inter_token_latency` pools the gaps between tokens (a chunk's tokens all get the
chunk's time); the SDK and Locust rows pool the gaps between content chunks: our per-token ITL
when each chunk carries one token.
"""

from __future__ import annotations

import csv
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.client_tool_base import RunContext, Tool, ToolResult, median_ms, tool_bin
from benchmarks.record_medians import record_medians

__all__ = ["build_tools"]

REPO = Path(__file__).resolve().parents[1]
AIPERF_TOKENIZER_REPO = "batchgate/byte-tokenizer"


class Guidellm(Tool):
    def command(self, ctx: RunContext) -> list[str]:
        backend = f"kind=openai_http,target={ctx.url}"
        if ctx.endpoint == "completions" and not ctx.bare:
            backend += ",request_format=/v1/completions"
        if not ctx.stream and not ctx.bare:
            backend += ",stream=false"
        data = f"kind=synthetic_text,prompt_tokens={ctx.prompt_tokens}"
        if not ctx.bare:
            data += f",output_tokens={ctx.output_tokens}"
        return [
            tool_bin(self.python, "guidellm"), "run",
            "--backend", backend,
            # constant, not poisson: guidellm 0.8.1's poisson re-seeds its generator for every
            # request (every gap is the first draw, 0.204 s at 5 req/s) and races its start
            # offset (under load every request went out at once).
            "--profile", f"kind=constant,rate={ctx.rate_rps:g}",
            "--constraint", f"kind=max_requests,count={ctx.requests}",
            "--tokenizer", f"kind=huggingface_auto,model={ctx.tokenizer}",
            "--data", data,
            "--output", f"kind=json,path={ctx.out_dir / 'benchmarks.json'}",
            "--disable-console-interactive",
        ]  # fmt: skip

    def read(self, ctx: RunContext) -> ToolResult:
        report = json.loads((ctx.out_dir / "benchmarks.json").read_text())
        bench = report["benchmarks"][0]
        metrics = bench["metrics"]
        totals = metrics["request_totals"]
        successful = bench["requests"]["successful"]
        starts = [r["info"]["timings"]["request_start"] for r in successful]
        ends = [r["info"]["timings"]["request_end"] for r in successful]
        return ToolResult(
            requests=int(totals["total"]),
            errors=int(totals["errored"]) + int(totals.get("incomplete", 0)),
            ttft_p50_ms=metrics["time_to_first_token_ms"]["successful"]["median"],
            itl_p50_ms=metrics["inter_token_latency_ms"]["successful"]["median"],
            itl_basis="tpot",
            itl_field="metrics.inter_token_latency_ms.successful.median",
            window_wall=(min(starts), max(ends)) if starts else None,
            extra={
                "output_tokens_median": metrics["output_token_count"]["successful"]["median"],
                "prompt_tokens_median": metrics["prompt_token_count"]["successful"]["median"],
            },
        )


class AIPerf(Tool):
    def command(self, ctx: RunContext) -> list[str]:
        cmd = [
            tool_bin(self.python, "aiperf"), "profile",
            "--model", ctx.model,
            "--url", ctx.url,
            "--tokenizer", AIPERF_TOKENIZER_REPO,
            "--request-rate", f"{ctx.rate_rps:g}",
            "--request-count", str(ctx.requests),
            "--artifact-dir", str(ctx.out_dir),
            "--ui-type", "none",
        ]  # fmt: skip
        if ctx.bare:
            return cmd
        cmd += [
            "--endpoint-type", ctx.endpoint,
            "--isl", str(ctx.prompt_tokens),
            "--osl", str(ctx.output_tokens),
            "--extra-inputs", "ignore_eos:true",
        ]  # fmt: skip
        return [*cmd, "--streaming"] if ctx.stream else cmd

    def env(self, ctx: RunContext) -> dict[str, str]:
        # AIPerf 0.13.0 offline (HF_HUB_OFFLINE=1) resolves --tokenizer through
        # huggingface_hub.snapshot_download(local_files_only=True), which refuses a directory
        # path ("Repo id must be in the form 'repo_name' or 'namespace/repo_name'"). So the
        # tokenizer is laid out as a cached hub snapshot and named by that repo id.
        cache = ctx.out_dir.parent / "aiperf-hf-cache"
        repo = cache / f"models--{AIPERF_TOKENIZER_REPO.replace('/', '--')}"
        snapshot = repo / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text("0" * 40)
        for source in ctx.tokenizer.iterdir():
            if source.is_file():
                shutil.copy(source, snapshot / source.name)
        return {"HF_HUB_CACHE": str(cache)}

    def read(self, ctx: RunContext) -> ToolResult:
        found = sorted(ctx.out_dir.rglob("profile_export_aiperf.json"))
        summary = json.loads(found[0].read_text())
        records = summary.get("records", summary)

        def p50(tag: str) -> float | None:
            entry = records.get(tag)
            return None if entry is None else float(entry["p50"])

        errors = (records.get("error_request_count") or {}).get("avg") or 0
        completed = (records.get("completed_request_count") or {}).get("avg")
        count = completed if completed is not None else records["request_count"]["avg"] + errors
        starts, ends = [], []
        for jsonl in found[0].parent.glob("profile_export.jsonl"):
            for line in jsonl.read_text().splitlines():
                meta = json.loads(line).get("metadata", {})
                if meta.get("request_start_ns") and meta.get("request_end_ns"):
                    starts.append(meta["request_start_ns"] / 1e9)
                    ends.append(meta["request_end_ns"] / 1e9)
        return ToolResult(
            requests=int(count),
            errors=int(errors),
            ttft_p50_ms=p50("time_to_first_token"),
            itl_p50_ms=p50("inter_token_latency"),
            itl_basis="tpot",
            itl_field="records.inter_token_latency.p50",
            window_wall=(min(starts), max(ends)) if starts else None,
            extra={
                "inter_chunk_latency_p50_ms": p50("inter_chunk_latency"),
                "output_sequence_length_p50": p50("output_sequence_length"),
                "input_sequence_length_p50": p50("input_sequence_length"),
            },
        )


class InferencePerf(Tool):
    def command(self, ctx: RunContext) -> list[str]:
        n = ctx.requests
        fixed = {"type": "fixed", "std_dev": 0, "total_count": n}
        lengths = {
            "input_distribution": {**fixed, "min": ctx.prompt_tokens, "max": ctx.prompt_tokens,
                                   "mean": ctx.prompt_tokens},
            "output_distribution": {**fixed, "min": ctx.output_tokens, "max": ctx.output_tokens,
                                    "mean": ctx.output_tokens},
        }  # fmt: skip
        # Chat takes the default mock data (the length-exact generators serve only
        # /v1/completions). Completions use "synthetic" (Shakespeare cut to exact token
        # counts): "random" decodes random token ids, which on a byte-level tokenizer are mostly
        # invalid UTF-8 (U+FFFD, 3 bytes each), so it fails to converge on an exact length for
        # about half the prompts and silently drops those requests. It is still captured
        # (variant "random-stream") for the odd prompts it sends.
        if ctx.endpoint == "chat":
            data: dict[str, Any] = {"type": "mock"}
        else:
            kind = "random" if ctx.variant == "random-stream" else "synthetic"
            data = {"type": kind, **lengths}
        config: dict[str, Any] = {
            "api": {"type": "chat" if ctx.endpoint == "chat" else "completion",
                    "streaming": ctx.stream},
            "data": data,
            "load": {"stages": [  # its default load type: constant rate
                {"rate": ctx.rate_rps, "duration": max(1, round(n / ctx.rate_rps))}]},
            "server": {"type": "vllm", "model_name": ctx.model, "base_url": ctx.url},
            "tokenizer": {"pretrained_model_name_or_path": str(ctx.tokenizer)},
            "report": {"request_lifecycle": {"summary": True, "per_stage": False,
                                             "per_request": True}},
            "storage": {"local_storage": {"path": str(ctx.out_dir / "reports")}},
        }  # fmt: skip
        if ctx.bare:  # its defaults: mock data on /v1/completions, not streamed
            del config["api"], config["data"]
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        path = ctx.out_dir / "config.yml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return [tool_bin(self.python, "inference-perf"), "--config_file", str(path)]

    def config_text(self, ctx: RunContext) -> str | None:
        return (ctx.out_dir / "config.yml").read_text()

    def read(self, ctx: RunContext) -> ToolResult:
        found = sorted(ctx.out_dir.rglob("summary_lifecycle_metrics.json"))
        summary = json.loads(found[0].read_text())
        latency = summary["successes"]["latency"]
        failures = summary.get("failures", {}).get("count", 0)
        successes = summary["successes"]["count"]

        def median(name: str) -> float | None:
            entry = latency.get(name)
            return None if not entry or entry.get("median") is None else entry["median"] * 1000

        window = None
        per_request = sorted(ctx.out_dir.rglob("per_request_lifecycle_metrics.json"))
        if per_request:
            rows = json.loads(per_request[0].read_text())
            # start_time/end_time are time.perf_counter(): CLOCK_MONOTONIC on Linux.
            window = (min(r["start_time"] for r in rows), max(r["end_time"] for r in rows))
        return ToolResult(
            requests=int(successes) + int(failures),
            errors=int(failures),
            ttft_p50_ms=median("time_to_first_token"),
            itl_p50_ms=median("inter_token_latency"),
            itl_basis="itl0",
            itl_field="successes.latency.inter_token_latency.median",
            window_monotonic=window,
            extra={"time_per_output_token_p50_ms": median("time_per_output_token")},
        )


class OpenAISDK(Tool):
    def command(self, ctx: RunContext) -> list[str]:
        cmd = [
            str(self.python), str(REPO / "benchmarks" / "openai_sdk_client.py"),
            "--base-url", f"{ctx.url}/v1", "--model", ctx.model,
            "--endpoint", ctx.endpoint, "--rate", f"{ctx.rate_rps:g}",
            "--requests", str(ctx.requests), "--prompt-tokens", str(ctx.prompt_tokens),
            "--out", str(ctx.out_dir / "sdk.jsonl"), "--seed", str(ctx.seed),
        ]  # fmt: skip
        if ctx.bare:  # model and messages only: no stream, no limit
            return [*cmd, "--bare"]
        cmd += ["--max-tokens", str(ctx.output_tokens), "--ignore-eos"]
        return cmd if ctx.stream else [*cmd, "--no-stream"]

    def read(self, ctx: RunContext) -> ToolResult:
        rows = [json.loads(line) for line in (ctx.out_dir / "sdk.jsonl").read_text().splitlines()]
        ok = [r for r in rows if not r["error"] and r["chunk_times"]]
        ttfts = [r["chunk_times"][0] - r["sent_at"] for r in ok]
        gaps = [b - a for r in ok for a, b in itertools.pairwise(r["chunk_times"])]
        # The SDK's own share of its TTFT: create() until it hands the built request to httpx.
        # TTFT is compared from create() (what a user's code measures); from the hand-off is
        # where batchgate stamps sent_at (its body is built just before).
        handed = [r for r in ok if r.get("handed_at") is not None]
        return ToolResult(
            requests=len(rows),
            errors=len(rows) - len(ok),
            ttft_p50_ms=median_ms(ttfts),
            itl_p50_ms=median_ms(gaps),
            itl_basis="chunk",
            itl_field="gaps between content chunks (script)",
            window_monotonic=(min(r["sent_at"] for r in ok), max(r["done_at"] for r in ok))
            if ok
            else None,
            extra={
                "errors_sample": [r["error"] for r in rows if r["error"]][:3],
                "sdk_build_p50_ms": median_ms([r["handed_at"] - r["sent_at"] for r in handed]),
                "ttft_from_handoff_p50_ms": median_ms(
                    [r["chunk_times"][0] - r["handed_at"] for r in handed]
                ),
            },
        )


class PlainLocust(Tool):
    def command(self, ctx: RunContext) -> list[str]:
        overrides: dict[str, Any] = {
            "rate_rps": ctx.rate_rps,
            "duration_seconds": ctx.requests / ctx.rate_rps,
            "seed": ctx.seed,  # batchgate load beside it uses another: independent arrivals
        }
        if not ctx.bare:
            overrides.update(
                prompt_tokens=ctx.prompt_tokens, output_tokens=ctx.output_tokens,
                endpoint=ctx.endpoint, stream=ctx.stream, extra_body={"ignore_eos": True},
            )  # fmt: skip
        return [
            tool_bin(self.python, "locust"), "-f", str(REPO / "loadgen" / "locustfile.py"),
            "--headless", "-u", "1", "-r", "1", "--host", ctx.url,
            "--loadgen-profile", "steady", "--loadgen-overrides-json", json.dumps(overrides),
            "--loadgen-out", str(ctx.out_dir / "run"), "--csv", str(ctx.out_dir / "locust"),
        ]  # fmt: skip

    def read(self, ctx: RunContext) -> ToolResult:
        with open(ctx.out_dir / "locust_stats.csv", newline="") as f:
            rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
        ttft_row = next(row for (kind, _), row in rows.items() if kind == "TTFT")
        e2e_row = next(row for (kind, _), row in rows.items() if kind == "E2E")
        records = [
            json.loads(line)
            for line in (ctx.out_dir / "run" / "requests.jsonl").read_text().splitlines()
        ]
        medians = record_medians(records)
        return ToolResult(
            requests=int(e2e_row["Request Count"]),
            errors=int(e2e_row["Failure Count"]),
            # Locust rounds its percentiles (to whole ms under 100 ms): the records' exact
            # TTFT is the value compared, Locust's own is kept beside it.
            ttft_p50_ms=medians["ttft_p50_ms"],
            itl_p50_ms=medians["chunk_gap_p50_ms"],
            itl_basis="chunk",
            itl_field="requests.jsonl of the Locust run: gaps between content chunks",
            window_monotonic=medians["window"],
            extra={"locust_csv_ttft_p50_ms": float(ttft_row["50%"])},
        )


class BatchgateAA(Tool):
    """A second `batchgate load` (another seed): the A/A control, whose differences from the
    first are this machine's noise floor for the comparison (same client, same formulas)."""

    def command(self, ctx: RunContext) -> list[str]:
        return [
            str(self.python), "-m", "loadgen", "--target", ctx.url, "--profile", "steady",
            "--rate", f"{ctx.rate_rps:g}", "--duration", f"{ctx.requests / ctx.rate_rps:g}",
            "--out", str(ctx.out_dir / "run"), "--model", ctx.model, "--endpoint", ctx.endpoint,
            "--set", f"prompt_tokens={ctx.prompt_tokens}",
            "--set", f"output_tokens={ctx.output_tokens}",
            "--set", "extra_body.ignore_eos=true", "--set", "warmup_seconds=0",
            "--set", f"seed={ctx.seed}",
        ]  # fmt: skip

    def read(self, ctx: RunContext) -> ToolResult:
        lines = (ctx.out_dir / "run" / "requests.jsonl").read_text().splitlines()
        medians = record_medians([json.loads(line) for line in lines if line.strip()])
        return ToolResult(
            requests=medians["requests"],
            errors=medians["errors"],
            ttft_p50_ms=medians["ttft_p50_ms"],
            itl_p50_ms=medians["itl_p50_ms"],
            itl_basis="itl",
            itl_field="requests.jsonl, gate formulas (per-token ITL)",
            window_monotonic=medians["window"],
        )


def build_tools(
    *,
    guidellm: Path | None,
    aiperf: Path | None,
    inference_perf: Path | None,
    openai_python: Path | None,
    locust_python: Path | None,
) -> list[Tool]:
    """Tools whose environment (a venv directory, or an interpreter) was given and exists."""
    tools: list[Tool] = []

    def python_of(venv: Path) -> Path:
        return venv / "bin" / "python" if venv.is_dir() else venv

    if guidellm and python_of(guidellm).exists():
        tools.append(Guidellm(name="guidellm", python=python_of(guidellm), arrival="constant"))
    if aiperf and python_of(aiperf).exists():
        tools.append(AIPerf(name="aiperf", python=python_of(aiperf)))
    if inference_perf and python_of(inference_perf).exists():
        tools.append(
            InferencePerf(
                name="inference-perf",
                python=python_of(inference_perf),
                endpoint="completions",
                arrival="constant",
                variants=(
                    ("defaults", "completions", False),
                    ("completions-stream", "completions", True),
                    ("random-stream", "completions", True),
                    ("chat-stream", "chat", True),
                    ("completions-nostream", "completions", False),
                ),
            )
        )
    if openai_python and python_of(openai_python).exists():
        tools.append(
            OpenAISDK(
                name="openai-sdk",
                python=python_of(openai_python),
                variants=(
                    ("defaults", "chat", False),
                    ("chat-stream", "chat", True),
                    ("completions-stream", "completions", True),
                    ("chat-nostream", "chat", False),
                    ("completions-nostream", "completions", False),
                ),
            )
        )
    if locust_python and python_of(locust_python).exists():
        tools.append(PlainLocust(name="locust", python=python_of(locust_python)))
        tools.append(BatchgateAA(name="batchgate-aa", python=python_of(locust_python), variants=()))
    return tools
