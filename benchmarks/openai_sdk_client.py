"""Open-loop streaming load through the official `openai` Python SDK, timing every chunk.

It owns one run of the SDK against an OpenAI-compatible server (Poisson arrivals at a fixed
rate, `AsyncOpenAI.chat.completions.create(..., stream=True)` or `completions.create`) and
writes one JSON line per request: the send time (before `create()`, as a user's code would
stamp it), the time the SDK handed the request it built to httpx (its `request` event hook: the
point where batchgate stamps `sent_at`, after building its body), the arrival time of each
chunk that carries content, and the final usage. It knows nothing of batchgate's records or
formulas: the caller (bench_clients.py) turns these lines into TTFT and ITL. Run it with a
Python that has `openai`.

    python benchmarks/openai_sdk_client.py --base-url http://127.0.0.1:8000/v1 --model tiny \
        --rate 5 --requests 120 --out sdk.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import random
import sys
import time
from typing import Any

# The record of the request the running task is sending: the httpx hook has only the request.
_CURRENT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "current_record", default=None
)


async def _stamp_handoff(request: Any) -> None:
    record = _CURRENT.get()
    if record is not None and record["handed_at"] is None:
        record["handed_at"] = time.monotonic()


def _prompt(prompt_tokens: int, rng: random.Random) -> str:
    # ASCII: one byte = one token on the bundled server's byte tokenizer.
    letters = "abcdefghijklmnopqrstuvwxyz "
    return "".join(rng.choice(letters) for _ in range(prompt_tokens))


async def _one(client: Any, args: argparse.Namespace, prompt: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "sent_at": None, "handed_at": None, "done_at": None, "chunk_times": [], "usage": None,
        "error": None,
    }  # fmt: skip
    _CURRENT.set(record)  # this task's context only (create_task copies it)
    extra = {"ignore_eos": True} if args.ignore_eos else None
    record["sent_at"] = time.monotonic()
    stream_kwargs = {"stream": True, "stream_options": {"include_usage": True}}
    kwargs: dict[str, Any] = {"model": args.model}
    if not args.bare:
        kwargs.update(max_tokens=args.max_tokens, extra_body=extra)
    if not (args.no_stream or args.bare):
        kwargs.update(stream_kwargs)
    try:
        if args.endpoint == "chat":
            messages = [{"role": "user", "content": prompt}]
            answer = await client.chat.completions.create(messages=messages, **kwargs)
        else:
            answer = await client.completions.create(prompt=prompt, **kwargs)
        if args.no_stream or args.bare:
            record["chunk_times"].append(time.monotonic())
            record["usage"] = answer.usage.model_dump() if answer.usage else None
        else:
            async for chunk in answer:
                now = time.monotonic()
                if chunk.usage is not None:
                    record["usage"] = chunk.usage.model_dump()
                for choice in chunk.choices:
                    text = choice.delta.content if args.endpoint == "chat" else choice.text
                    if text:
                        record["chunk_times"].append(now)
        record["done_at"] = time.monotonic()
    except Exception as exc:  # every failure is data for the caller's error count
        record["error"] = f"{type(exc).__name__}: {exc}"
    return record


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import openai

    rng = random.Random(args.seed)
    # The SDK's own default httpx client (its timeouts, limits, redirects), plus one hook.
    http_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_stamp_handoff]})
    client = openai.AsyncOpenAI(
        base_url=args.base_url, api_key=args.api_key, http_client=http_client
    )
    tasks = []
    start = time.monotonic() + 0.2
    planned = start
    for _ in range(args.requests):
        planned += rng.expovariate(args.rate)
        delay = planned - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(client, args, _prompt(args.prompt_tokens, rng))))
    records = await asyncio.gather(*tasks)
    await client.close()
    return list(records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="EMPTY")
    parser.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    parser.add_argument("--rate", type=float, default=5.0, help="Poisson arrivals, req/s")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--ignore-eos", action="store_true", help="send vLLM's ignore_eos")
    parser.add_argument("--no-stream", action="store_true", help="non-streaming requests")
    parser.add_argument(
        "--bare", action="store_true", help="the SDK's defaults: model and messages/prompt only"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="JSONL, one line per request")
    args = parser.parse_args()
    records = asyncio.run(run(args))
    import openai

    with open(args.out, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    errors = sum(1 for r in records if r["error"])
    print(f"openai {openai.__version__}: {len(records)} requests, {errors} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
