"""A logging TCP proxy on loopback: what a client tool really sends to an OpenAI server.

It owns relaying bytes between a client and one upstream HTTP/1.1 server unchanged (streaming
keeps its timing: nothing is buffered on the way) and, when a connection closes, parsing the two
byte streams into request/response pairs appended to a JSONL file. It knows nothing of the
OpenAI API or of which tool is calling. Used by bench_clients.py (--capture) to record the
bodies that tests/reference_server/api/test_client_bodies_replay.py replays.

    python benchmarks/body_proxy.py --upstream 127.0.0.1:8000 --port 0 --port-file F --log X.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["parse_http_messages", "serve"]

RESPONSE_BODY_KEEP_BYTES = 64 * 1024


def _headers(block: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = block.decode("latin-1").split("\r\n")
    pairs = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        pairs.append((name.strip(), value.strip()))
    return lines[0], pairs


def _dechunk(data: bytes, start: int) -> tuple[bytes, int] | None:
    body = bytearray()
    pos = start
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(data[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            end = data.find(b"\r\n", pos)  # trailers are not used by these clients
            return (bytes(body), end + 2) if end >= 0 else (bytes(body), len(data))
        body += data[pos : pos + size]
        pos += size + 2


def parse_http_messages(data: bytes, *, is_request: bool) -> list[dict[str, Any]]:
    """Split one direction of an HTTP/1.1 connection into messages (start line, headers, body)."""
    messages = []
    pos = 0
    while pos < len(data):
        head_end = data.find(b"\r\n\r\n", pos)
        if head_end < 0:
            break
        start_line, headers = _headers(data[pos:head_end])
        lower = {k.lower(): v for k, v in headers}
        body_start = head_end + 4
        if "chunked" in lower.get("transfer-encoding", "").lower():
            parsed = _dechunk(data, body_start)
            body, pos = parsed if parsed else (data[body_start:], len(data))
        elif "content-length" in lower:
            end = body_start + int(lower["content-length"])
            body, pos = data[body_start:end], end
        elif is_request:
            body, pos = b"", body_start
        else:  # a response without length runs to the end of the connection
            body, pos = data[body_start:], len(data)
        messages.append({"start_line": start_line, "headers": headers, "body": body})
    return messages


def _record(request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, Any]:
    method, _, rest = request["start_line"].partition(" ")
    path = rest.rsplit(" ", 1)[0]
    record: dict[str, Any] = {
        "method": method,
        "path": path,
        "headers": request["headers"],
        "body_text": request["body"].decode("utf-8", errors="surrogateescape"),
    }
    if response is not None:
        status = response["start_line"].split(" ", 2)
        record["response_status"] = int(status[1]) if len(status) > 1 else None
        record["response_headers"] = response["headers"]
        record["response_body_text"] = response["body"][:RESPONSE_BODY_KEEP_BYTES].decode(
            "utf-8", errors="replace"
        )
    return record


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sink: bytearray):
    try:
        while chunk := await reader.read(65536):
            sink += chunk
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()


async def serve(upstream: tuple[str, int], port: int, port_file: Path | None, log: Path) -> None:
    log_lock = asyncio.Lock()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(*upstream)
        sent, received = bytearray(), bytearray()
        await asyncio.gather(_pump(client_r, up_w, sent), _pump(up_r, client_w, received))
        for w in (client_w, up_w):
            w.close()
        requests = parse_http_messages(bytes(sent), is_request=True)
        responses = parse_http_messages(bytes(received), is_request=False)
        lines = [
            json.dumps(_record(req, responses[i] if i < len(responses) else None))
            for i, req in enumerate(requests)
        ]
        async with log_lock:
            with log.open("a", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in lines)

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    if port_file is not None:
        port_file.write_text(str(bound))
    async with server:
        await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the real server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    parser.add_argument("--log", type=Path, required=True, help="JSONL of request/response pairs")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve((host, int(port)), args.port, args.port_file, args.log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
