"""Benchmark: third-party load generators against `batchgate serve`, each beside `batchgate load`.

For each client tool given (guidellm, AIPerf, inference-perf, the official `openai` SDK, plain
Locust with loadgen/locustfile.py, and a second `batchgate load` as the A/A control) it runs,
against one bundled server, `batchgate load --profile steady` (Poisson) at --rate req/s and the
tool at the same rate in the same window, then compares the medians the tool writes in its own
output files with batchgate's over the records sent inside the tool's window: TTFT, and ITL like
with like — batchgate's value is computed from its records the way the tool defines "ITL"
(client_tools.ToolResult.itl_basis: guidellm's and AIPerf's ITL are per-request TPOT,
inference-perf stamps a chunk's tokens at its arrival, the SDK and Locust rows are gaps between
chunks). Both send ~--prompt-tokens prompt tokens and exactly --output-tokens output tokens
(ignore_eos). The A/A row (same client, another seed) is this machine's noise floor; each row
also gets its own: the 95% band of its differences (`median_noise` on batchgate's records in the
window, scaled to both sample sizes). Arrival seeds are drawn anew each run (--seed fixes them).
Prints a table and writes benchmarks/results/clients.json.

    .venv/bin/python -m benchmarks.bench_clients --guidellm /tmp/clients/guidellm \
        --aiperf /tmp/clients/aiperf --inference-perf /tmp/clients/infperf [--rate 5]

Each tool runs from its own venv (they pin conflicting versions; inference-perf needs Python
3.12) with HF_HUB_OFFLINE=1 and the repo's reference_server/hf_tokenizer. With --capture DIR it
instead runs each tool's variants (its bare defaults; chat/completions, stream or not; a few
requests each) through benchmarks/body_proxy.py and writes the requests they sent as fixtures
for tests/reference_server/api/test_client_bodies_replay.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.client_table import print_table
from benchmarks.client_tool_base import RunContext, Tool, shell_line
from benchmarks.client_tools import build_tools
from benchmarks.harness import REPO_ROOT as REPO
from benchmarks.harness import RESULTS_DIR, Server, write_result
from benchmarks.record_medians import median_noise, record_medians
from benchmarks.wire_capture import Capture, CaptureError, read_pcap, ttft_by_client, wire_requests

RESULTS = RESULTS_DIR / "clients.json"
TOKENIZER = REPO / "reference_server" / "hf_tokenizer"
CLIENT_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# batchgate's value that means what each tool's "ITL" means (client_tools.ToolResult.itl_basis).
BATCHGATE_ITL = {
    "tpot": "tpot_p50_ms", "chunk": "chunk_gap_p50_ms",
    "itl0": "zero_filled_itl_p50_ms", "itl": "itl_p50_ms",
}  # fmt: skip
# Request headers a replay sends again (the rest are per connection or recomputed).
DROP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


@dataclass(frozen=True)
class Target:
    """The started server as the tools see it (benchmarks.harness.Server runs it)."""

    url: str
    port: int
    model: str

    @classmethod
    def of(cls, server: Server) -> Target:
        return cls(server.url, server.port, _get_json(server.url + "/v1/models")["data"][0]["id"])

    def warm_up(self, requests: int = 4) -> None:
        """A few sequential generations, so no tool meets the first-request costs."""
        body = {"model": self.model, "messages": [{"role": "user", "content": "x" * 128}],
                "max_tokens": 64, "ignore_eos": True, "stream": False}  # fmt: skip
        for _ in range(requests):
            request = urllib.request.Request(
                self.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=60) as resp:
                resp.read()


def _batchgate_load(server: Target, out: Path, args: argparse.Namespace, endpoint: str):
    # A long schedule stopped with SIGINT once the tool is done: the records cover the tool's
    # whole run, whatever its start-up time; the comparison keeps those sent in its window.
    cmd = [
        sys.executable, "-m", "loadgen", "--target", server.url, "--profile", "steady",
        "--rate", f"{args.rate:g}", "--duration", str(args.requests / args.rate + 900),
        "--out", str(out), "--model", server.model, "--endpoint", endpoint,
        "--set", f"prompt_tokens={args.prompt_tokens}",
        "--set", f"output_tokens={args.output_tokens}",
        "--set", "extra_body.ignore_eos=true", "--set", "warmup_seconds=0",
        "--set", f"seed={args.seed}",
    ]  # fmt: skip
    log = open(out.parent / f"{out.name}.log", "wb")  # noqa: SIM115 (closed by the caller)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    records = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while not (records.exists() and records.stat().st_size > 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("batchgate load sent nothing")
        time.sleep(0.1)
    return cmd, proc, log


def _read_records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def compare_tool(tool: Tool, server: Target, tmp: Path, args: argparse.Namespace) -> dict:
    version = tool.version()
    ctx = RunContext(
        url=server.url, model=server.model, tokenizer=args.tokenizer, rate_rps=args.rate,
        requests=args.requests, prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens, out_dir=tmp / tool.name, endpoint=tool.endpoint,
        seed=args.seed + 1,
    )  # fmt: skip
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    bg_out = tmp / f"{tool.name}-batchgate"
    capture = Capture(server.port, tmp / f"{tool.name}.pcap") if args.wire else None
    if capture is not None:
        capture.start()
    try:
        bg_cmd, bg_proc, bg_log = _batchgate_load(server, bg_out, args, tool.endpoint)
        cmd = [*tool.command(ctx), *_extra_args(tool, args)]
        launched = time.monotonic()
        with open(ctx.out_dir / "tool.log", "wb") as log:
            rc = subprocess.run(
                cmd, cwd=ctx.out_dir, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **CLIENT_ENV, **tool.env(ctx)},
                timeout=args.requests / args.rate + 600,
            ).returncode  # fmt: skip
        exited = time.monotonic()
        bg_proc.send_signal(signal.SIGINT)
        bg_proc.wait(timeout=120)
        bg_log.close()
    finally:  # no tcpdump left running when a tool hangs past its timeout
        if capture is not None:
            capture.stop()
    row: dict[str, Any] = {
        "tool": tool.name, "version": version, "command": shell_line(cmd), "exit_code": rc,
        "batchgate_command": shell_line(bg_cmd), "endpoint": tool.endpoint,
        "arrival": tool.arrival,
    }  # fmt: skip
    try:
        result = tool.read(ctx)
    except (OSError, KeyError, IndexError, ValueError, StopIteration) as exc:
        row["error"] = f"no result: {type(exc).__name__}: {exc}"
        row["tool_log_tail"] = (ctx.out_dir / "tool.log").read_text(errors="replace")[-3000:]
        return row
    offset = time.time() - time.monotonic()
    if result.window_monotonic is not None:
        window = result.window_monotonic
    elif result.window_wall is not None:
        window = (result.window_wall[0] - offset, result.window_wall[1] - offset)
    else:
        window = (launched, exited)
    bg_records = _read_records(bg_out)
    bg = record_medians(bg_records, (window[0], window[1]))
    itl_key = BATCHGATE_ITL[result.itl_basis]
    bg_itl = bg[itl_key]
    noise = median_noise(bg_records, (window[0], window[1]), ("ttft_p50_ms", itl_key))

    ttft_diff = _minus(result.ttft_p50_ms, bg["ttft_p50_ms"])
    itl_diff = _minus(result.itl_p50_ms, bg_itl)
    within = (
        ttft_diff is not None
        and itl_diff is not None
        and abs(ttft_diff) <= args.ttft_target_ms
        and abs(itl_diff) <= args.itl_target_ms
    )
    load = json.loads((bg_out / "load.json").read_text())
    row.update(
        requests=result.requests, errors=result.errors,
        ttft_p50_ms=result.ttft_p50_ms, itl_p50_ms=result.itl_p50_ms,
        itl_basis=result.itl_basis, itl_field=result.itl_field,
        batchgate=bg, batchgate_itl_compared_ms=bg_itl,
        batchgate_measurement_valid=load.get("measurement_valid"),
        batchgate_invalid_reasons=load.get("invalid_reasons"),
        ttft_diff_ms=ttft_diff, itl_diff_ms=itl_diff, within_target=within,
        ttft_diff_noise95_ms=_band(noise["ttft_p50_ms"], bg["requests"], result.requests),
        itl_diff_noise95_ms=_band(noise[itl_key], bg["requests"], result.requests),
        window_seconds=window[1] - window[0], tool_extra=result.extra,
    )  # fmt: skip
    if capture is not None:
        row["wire"] = _wire(capture, (window[0] + offset, window[1] + offset), row)
    return row


def _wire(capture: Capture, window_wall: tuple[float, float], row: dict) -> dict:
    split = ttft_by_client(
        wire_requests(read_pcap(capture.path), capture.port), window_wall, "batchgate-loadgen"
    )
    tool, ours = split["tool"], split["batchgate"]
    if not tool["requests"]:  # Locust and the A/A row send with batchgate's own client
        return {"note": "not split: the tool's requests carry batchgate's User-Agent", **split}
    return {
        **split,
        "tool_lag_ms": _minus(row["ttft_p50_ms"], tool["ttft_p50_ms"]),
        "batchgate_lag_ms": _minus(row["batchgate"]["ttft_p50_ms"], ours["ttft_p50_ms"]),
        "wire_diff_ms": _minus(tool["ttft_p50_ms"], ours["ttft_p50_ms"]),
    }


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _band(se_ms: float | None, n_batchgate: int, n_tool: int) -> float | None:
    """95% half-width of a difference of two medians, from batchgate's side's standard error:
    the tool's own side, whose per-request values not every tool writes, is taken to be as
    noisy per request (the same server, the same window), so it scales with 1/sqrt(n)."""
    if se_ms is None or n_tool <= 0:
        return None
    return 1.96 * se_ms * math.sqrt(1.0 + n_batchgate / n_tool)


def _extra_args(tool: Tool, args: argparse.Namespace) -> list[str]:
    """--tool-arg NAME=ARG values for this tool, in order (comparison runs only)."""
    extra = []
    for item in args.tool_arg:
        name, _, value = item.partition("=")
        if name == tool.name:
            extra.append(value)
    return extra


def _fixture_headers(pairs: list[list[str]]) -> dict[str, str]:
    return {k: v for k, v in pairs if k.lower() not in DROP_HEADERS}


def capture_tool(tool: Tool, server: Target, tmp: Path, args: argparse.Namespace) -> list[dict]:
    """Run each variant through the logging proxy; return fixture dicts (bodies as sent)."""
    version = tool.version()
    fixtures: list[dict] = []
    seen_others: set[tuple[str, str]] = set()  # discovery, health, metrics: once per tool
    for label, endpoint, stream in tool.variants:
        log = tmp / f"{tool.name}-{label}.jsonl"
        port_file = tmp / f"{tool.name}-{label}.port"
        proxy = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / "body_proxy.py"), "--upstream",
             server.url.removeprefix("http://"), "--port-file", str(port_file), "--log", str(log)],
        )  # fmt: skip
        while not (port_file.exists() and port_file.read_text()):
            time.sleep(0.05)
        ctx = RunContext(
            url=f"http://127.0.0.1:{port_file.read_text()}", model=server.model,
            tokenizer=args.tokenizer, rate_rps=args.rate, requests=args.capture_requests,
            prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
            out_dir=tmp / f"{tool.name}-{label}", endpoint=endpoint, stream=stream,
            bare=label == "defaults", variant=label,
        )  # fmt: skip
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        cmd = tool.command(ctx)
        with open(ctx.out_dir / "tool.log", "wb") as out:
            rc = subprocess.run(
                cmd, cwd=ctx.out_dir, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, **CLIENT_ENV, **tool.env(ctx)}, timeout=900,
            ).returncode  # fmt: skip
        time.sleep(1.0)  # connections close after the tool exits; the proxy logs on close
        proxy.send_signal(signal.SIGINT)
        proxy.wait(timeout=30)
        entries = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        config = tool.config_text(ctx)
        if config is not None:
            config = config.replace(ctx.url, "http://127.0.0.1:PORT").replace(str(tmp), "OUT")
        command = (
            shell_line(cmd)
            .replace(ctx.url, "http://127.0.0.1:PORT")
            .replace(str(tmp), "OUT")
            .replace(f"{REPO}/", "")
        )
        print(f"  {tool.name} {label}: exit {rc}, {len(entries)} requests seen")
        kept_posts = 0
        for entry in entries:
            if entry["method"] == "POST":
                if kept_posts >= args.bodies_per_variant:
                    continue
                kept_posts += 1
            elif (entry["method"], entry["path"]) in seen_others:
                continue
            else:
                seen_others.add((entry["method"], entry["path"]))
            fixtures.append({
                "tool": tool.name, "version": version, "variant": label,
                "command": command, "config_file": config, "tool_exit_code": rc,
                "captured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "method": entry["method"], "path": entry["path"],
                "headers": _fixture_headers(entry["headers"]),
                "body_text": entry["body_text"],
                "response_status_at_capture": entry.get("response_status"),
                "response_body_head_at_capture": (entry.get("response_body_text") or "")[:400]
                if (entry.get("response_status") or 200) >= 400 else None,
            })  # fmt: skip
    return fixtures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guidellm", type=Path, help="venv (or python) with guidellm")
    parser.add_argument("--aiperf", type=Path, help="venv (or python) with aiperf")
    parser.add_argument("--inference-perf", type=Path, help="venv (or python) with inference-perf")
    parser.add_argument(
        "--openai-python", type=Path, default=Path(sys.executable), help="python with openai"
    )
    parser.add_argument(
        "--locust-python", type=Path, default=Path(sys.executable),
        help="python with locust and this repo (loadgen/locustfile.py)",
    )  # fmt: skip
    parser.add_argument("--tools", help="comma list: only these tools")
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER, help="HF tokenizer dir")
    parser.add_argument("--rate", type=float, default=5.0, help="req/s of each tool")
    parser.add_argument("--requests", type=int, default=150, help="requests per tool run")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--seed", type=int, default=random.SystemRandom().randrange(1 << 20),
        help="arrival seed of batchgate load (the tools that take one get seed + 1); default: "
        "drawn anew, printed with the table",
    )  # fmt: skip
    parser.add_argument("--ttft-target-ms", type=float, default=1.5)
    parser.add_argument("--itl-target-ms", type=float, default=0.3)
    parser.add_argument("--server-arg", action="append", default=[], help="extra server flag")
    parser.add_argument(
        "--tool-arg", action="append", default=[], metavar="TOOL=ARG",
        help="append ARG to TOOL's command line in comparison runs (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--wire", action="store_true",
        help="also capture the server's port with tcpdump (root) and split each TTFT into the "
        "wire's part and the client's own lag (benchmarks/wire_capture.py)",
    )  # fmt: skip
    parser.add_argument("--keep", type=Path, help="keep every tool's output under this dir")
    parser.add_argument("--capture", type=Path, help="write request-body fixtures here instead")
    parser.add_argument("--capture-requests", type=int, default=3)
    parser.add_argument("--bodies-per-variant", type=int, default=2)
    args = parser.parse_args()
    tools = build_tools(
        guidellm=args.guidellm, aiperf=args.aiperf, inference_perf=args.inference_perf,
        openai_python=args.openai_python, locust_python=args.locust_python,
    )  # fmt: skip
    if args.tools:
        wanted = set(args.tools.split(","))
        tools = [t for t in tools if t.name in wanted]
    if not tools:
        parser.error("no client tool available")
    if args.wire and (why := Capture.available()):
        parser.error(f"--wire: {why}")
    with tempfile.TemporaryDirectory(prefix="bench-clients-") as tmp_name:
        tmp = args.keep or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        with Server.bundled(
            "--device", "cpu", *args.server_arg, workdir=tmp, start_timeout_seconds=180
        ) as started:  # fmt: skip
            server = Target.of(started)
            server.warm_up()
            if args.capture:
                return _capture(tools, server, tmp, args)
            rows = []
            for tool in tools:
                print(f"running {tool.name} beside batchgate load ...", flush=True)
                try:
                    rows.append(compare_tool(tool, server, tmp, args))
                except CaptureError as exc:  # not root, no such interface: say so, no traceback
                    print(f"bench_clients: --wire: {exc}", file=sys.stderr)
                    return 2
    result = {
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "rate_rps": args.rate,
        "requests": args.requests,
        "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens,
        "targets_ms": {"ttft": args.ttft_target_ms, "itl": args.itl_target_ms},
        "seed": args.seed,
        "tokenizer": str(args.tokenizer),
        "rows": rows,
    }
    write_result(RESULTS, result)
    print_table(rows, args)
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


def _capture(tools: list[Tool], server: Target, tmp: Path, args: argparse.Namespace) -> int:
    args.capture.mkdir(parents=True, exist_ok=True)
    bad = []
    for tool in tools:
        print(f"capturing {tool.name} ...", flush=True)
        fixtures = capture_tool(tool, server, tmp, args)
        for n, fixture in enumerate(fixtures, start=1):
            name = f"{tool.name}-{fixture['version']}-{n}.json"
            (args.capture / name).write_text(json.dumps(fixture, indent=2) + "\n")
            status = fixture["response_status_at_capture"]
            if status is None or status >= 400:
                bad.append((name, status, fixture["response_body_head_at_capture"]))
        print(f"  wrote {len(fixtures)} fixtures")
    for name, status, body in bad:
        print(f"NOT 200 at capture: {name}: {status} {body}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
