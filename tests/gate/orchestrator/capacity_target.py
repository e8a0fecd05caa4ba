"""A fake OpenAI streaming target whose capacity is known: `--slots` streams at a time, each at a
fixed per-stream rate (one token every `--itl-ms`); more requests wait for a slot (stdlib asyncio).

So its saturated output rate is exactly slots x 1000 / itl_ms tokens/s, far above what 64
closed-loop users reach when the slots are many: the truth the capacity sweep is measured
against. It states no limit (no /admin/batching, no /metrics: kind `openai`), so the sweep has to
find the plateau itself. Loopback only. Run it as a process:
    python tests/gate/orchestrator/capacity_target.py --port-file F --slots 400 --itl-ms 150
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path


class Target:
    def __init__(self, slots: int, itl_seconds: float) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.itl = itl_seconds

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip()
            for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)
        }
        length = int(headers.get("content-length") or 0)
        body = json.loads(await reader.readexactly(length)) if length else {}
        path = path.split("?", 1)[0]
        if method == "GET" and path == "/health":
            await self._json(writer, 200, {"status": "ok"})
        elif method == "GET" and path == "/v1/models":
            await self._json(
                writer, 200, {"object": "list", "data": [{"id": "fake", "object": "model"}]}
            )
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            await self._stream(writer, body, chat=path.endswith("chat/completions"))
        else:
            await self._json(writer, 404, {"error": {"message": "not found", "type": "not_found"}})
        return headers.get("connection", "").lower() != "close"

    async def _json(self, writer: asyncio.StreamWriter, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, body: dict, *, chat: bool) -> None:
        tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(payload: object) -> bytes:
            data = b"data: " + json.dumps(payload).encode() + b"\n\n"
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        async with self.slots:
            # Absolute times, so the per-stream rate does not drift with the event loop's load.
            start = time.monotonic()
            for i in range(tokens):
                await asyncio.sleep(max(0.0, start + (i + 1) * self.itl - time.monotonic()))
                last = i == tokens - 1
                choice = {"index": 0, "finish_reason": "length" if last else None}
                if chat:
                    choice["delta"] = {"content": "x"}
                else:
                    choice["text"] = "x"
                writer.write(event({"object": kind, "choices": [choice]}))
                await writer.drain()
        usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
        writer.write(event({"object": kind, "choices": [], "usage": usage}))
        data = b"data: [DONE]\n\n"
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
        await writer.drain()


async def _main(args: argparse.Namespace) -> None:
    target = Target(args.slots, args.itl_ms / 1000.0)
    server = await asyncio.start_server(target.handle, "127.0.0.1", args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    Path(args.port_file).write_text(str(port))
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--slots", type=int, default=400)
    p.add_argument("--itl-ms", type=float, default=150.0)
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
