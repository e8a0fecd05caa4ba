"""The `transformers serve --continuous-batching` peer of bench_engine.py: the same model (our
seeded weights for the preset, as a Hugging Face Llama checkpoint with the bundled tokenizer,
scripts/transformers_target.py) behind Hugging Face's OpenAI-compatible server, sent the same
workload over loopback HTTP.

It owns starting and stopping that server and replaying a list of (prompt length, max_tokens,
arrival) requests against it with their arrival times honoured: each request is sent at its
arrival on its own connection, non-streaming (`/v1/completions`), and timed from its arrival to
its answer, like the engine rows (finish - arrival). The prompt is printable ASCII of the
request's length in tokens (the byte tokenizer: one token a byte). config.json names no EOS, so
every answer runs to its max_tokens; the usage each answer reports is what is counted. Unlike
the in-process rows, these include HTTP and the server's tokenizing and detokenizing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def _transformers_target() -> Any:
    """scripts/transformers_target.py (a script, not a package module), loaded by path."""
    path = REPO / "scripts" / "transformers_target.py"
    spec = importlib.util.spec_from_file_location("transformers_target", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


__all__ = ["ServeRequest", "run_serve_peer", "serve_rows"]

START_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class ServeRequest:
    prompt_tokens: int
    max_tokens: int
    is_short: bool
    arrival_seconds: float


def _prompt(n: int, index: int) -> str:
    return "".join(chr(32 + (index * 31 + i * 7) % 95) for i in range(n))


async def _replay(url: str, model: str, requests: list[ServeRequest]) -> dict:
    limits = httpx.Limits(max_connections=len(requests) + 8, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(3600.0)) as client:
        start = time.monotonic()

        async def one(i: int, req: ServeRequest) -> tuple[float, int, bool, str | None]:
            await asyncio.sleep(max(0.0, start + req.arrival_seconds - time.monotonic()))
            arrived = start + req.arrival_seconds
            body = {
                "model": model,
                "prompt": _prompt(req.prompt_tokens, i),
                "max_tokens": req.max_tokens,
                "temperature": 0.0,
            }
            try:
                response = await client.post(url + "/v1/completions", json=body)
            except httpx.HTTPError as exc:
                return time.monotonic() - arrived, 0, req.is_short, f"{type(exc).__name__}"
            done = time.monotonic()
            if response.status_code != 200:
                return done - arrived, 0, req.is_short, f"HTTP {response.status_code}"
            tokens = int((response.json().get("usage") or {}).get("completion_tokens") or 0)
            return done - arrived, tokens, req.is_short, None

        results = await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
        wall = time.monotonic() - start
    errors = [e for *_, e in results if e is not None]
    short = sorted(lat for lat, _, is_short, e in results if is_short and e is None)
    tokens = sum(t for _, t, _, _ in results)
    asked = sum(r.max_tokens for r in requests)

    def pct(q: float) -> float | None:
        return short[min(len(short) - 1, int(q * len(short)))] if short else None

    return {
        "output_tokens_per_second": tokens / wall,
        "wall_seconds": wall,
        "output_tokens": tokens,
        "output_tokens_asked": asked,
        "short_p50_s": pct(0.5),
        "short_p99_s": pct(0.99),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def run_serve_peer(
    *, model: str, seed: int, num_blocks: int, phases: dict[str, list[ServeRequest]]
) -> dict[str, dict]:
    """{phase: row} for each phase's requests, one server for all; raises RuntimeError when
    the server does not start."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        target = _transformers_target()
        directory = target.build(Path(tmp) / "model", model=model, seed=seed)
        port = _free_port()
        log = Path(tmp) / "serve.log"
        argv = target.serve_argv(directory, port, num_blocks=num_blocks)
        with log.open("w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url, proc, log)
            served = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
            # One request first: the first answer pays for lazy set-up, not the batching.
            asyncio.run(_replay(url, served, [ServeRequest(16, 4, True, 0.0)]))
            rows = {}
            for phase, requests in phases.items():
                rows[phase] = asyncio.run(_replay(url, served, requests))
            return rows
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def serve_rows(model: str, seed: int, phases: list, num_blocks: int) -> dict[str, dict]:
    """bench_engine's entry: {phase: row} for [(phase, its Requests)], or {} when transformers
    serve cannot run here (said why); a failed start is a row with `error`."""
    try:
        import transformers
    except ImportError as exc:
        print(f"transformers serve peer skipped ({exc}; pip install -e '.[transformers]')")
        return {}
    try:
        rows = run_serve_peer(
            model=model,
            seed=seed,
            num_blocks=num_blocks,
            phases={
                phase: [
                    ServeRequest(
                        len(r.prompt_token_ids), r.max_tokens, r.is_short, r.arrival_seconds
                    )
                    for r in workload
                ]
                for phase, workload in phases
            },
        )
    except Exception as exc:  # report precisely why the peer could not run, keep the others
        return {phase: {"error": f"{type(exc).__name__}: {exc}"} for phase, _ in phases}
    for row in rows.values():
        row["transformers_version"] = transformers.__version__
    return rows


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"transformers serve not healthy after {START_TIMEOUT_SECONDS:.0f} s")
