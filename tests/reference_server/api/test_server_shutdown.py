"""SIGTERM drains: new requests get 503, in-flight ones finish or are aborted at the drain
timeout, and the process exits 0. Runs against the secured server (it stops it)."""

from __future__ import annotations

import asyncio
import signal

import httpx
from server_testlib import API_KEY, parse_sse

AUTH = {"Authorization": f"Bearer {API_KEY}"}


async def _stream(http: httpx.AsyncClient, max_tokens: int, started: asyncio.Event) -> list:
    body = {"prompt": f"drain {max_tokens}", "max_tokens": max_tokens, "stream": True}
    lines = []
    async with http.stream("POST", "/v1/completions", json=body, headers=AUTH) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            lines.append(line)
            if line:
                started.set()
    return parse_sse(lines)


async def _drain_scenario(server) -> dict:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        long_started, short_started = asyncio.Event(), asyncio.Event()
        long_task = asyncio.ensure_future(_stream(http, 3900, long_started))
        await asyncio.wait_for(long_started.wait(), 30)
        short_task = asyncio.ensure_future(_stream(http, 10, short_started))
        await asyncio.wait_for(short_started.wait(), 30)
        server.process.send_signal(signal.SIGTERM)
        refused = None
        for _ in range(400):  # bounded: the drain starts within a few event-loop turns
            response = await http.post(
                "/v1/completions", json={"prompt": "late", "max_tokens": 2}, headers=AUTH
            )
            if response.status_code == 503:
                refused = response
                break
            await asyncio.sleep(0.01)
        health = await http.get("/health")
        long_events, short_events = await asyncio.wait_for(
            asyncio.gather(long_task, short_task), 60
        )
    return {"refused": refused, "health": health, "long": long_events, "short": short_events}


def test_sigterm_drains_in_flight_requests_refuses_new_ones_and_exits_0(secured_server):
    result = asyncio.run(_drain_scenario(secured_server))
    refused = result["refused"]
    assert refused is not None, "no 503 while draining"
    assert refused.json()["error"]["code"] == "draining"
    assert result["health"].status_code == 503
    short = result["short"]
    assert short[-1] == "[DONE]"
    assert short[-2]["choices"][0]["finish_reason"] == "length"
    long = result["long"]
    assert long[-1] == "[DONE]"
    assert long[-2]["choices"][0]["finish_reason"] == "abort"
    long_text_chunks = sum(1 for e in long[:-2] if e["choices"][0]["text"])
    assert long_text_chunks < 3900
    assert secured_server.process.wait(timeout=60) == 0, secured_server.log()
