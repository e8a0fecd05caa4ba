"""overload_client.py tells a complete answer from a cut one: against a small local server on
port 0, a complete 503 is a status (with its code and Retry-After), and a connection closed
before the status, closed mid-body or reset is a transport error, never a status."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from benchmarks.overload_client import counts, flood, request_bytes, send_one

_ERROR = b'{"error": {"code": "server_connection_limit"}}'
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%b" % (len(_ERROR), _ERROR)
)
_CUT_STREAM = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n"
_STREAM = _CUT_STREAM + b"0\r\n\r\n"


async def _serve(behaviour: str) -> tuple[asyncio.AbstractServer, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if behaviour == "refuse":
            writer.write(_REFUSAL)
        elif behaviour == "stream":
            writer.write(_STREAM)
        elif behaviour == "cut":
            writer.write(_CUT_STREAM)
        elif behaviour == "short":
            writer.write(_REFUSAL[:-1])  # one body byte short of its Content-Length
        elif behaviour == "reset":
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _one(behaviour: str):
    async def go():
        server, port = await _serve(behaviour)
        async with server:
            request = request_bytes("127.0.0.1", port, "/v1/completions", {"prompt": "x"})
            return await send_one("127.0.0.1", port, request, timeout=30)

    return asyncio.run(go())


def test_a_complete_refusal_is_a_status_with_its_code_and_retry_after():
    outcome = _one("refuse")
    assert (outcome.status, outcome.code, outcome.retry_after) == (
        503,
        "server_connection_limit",
        "1",
    )
    assert outcome.transport is None


def test_a_complete_stream_is_a_200_with_a_first_byte_time():
    outcome = _one("stream")
    assert outcome.status == 200 and outcome.ttft is not None


@pytest.mark.parametrize(
    "behaviour, transport",
    [
        ("close", "closed before status"),
        ("cut", "closed mid-body"),
        ("short", "closed mid-body"),
        ("reset", None),
    ],  # a reset may read as a close: either way, no status
)
def test_a_connection_cut_without_a_complete_answer_is_a_transport_error(behaviour, transport):
    outcome = _one(behaviour)
    assert outcome.status is None
    assert outcome.transport is not None
    if transport is not None:
        assert outcome.transport == transport
    assert counts([outcome]) == {f"transport: {outcome.transport}": 1}


def test_a_refused_connection_is_a_transport_error():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    outcomes = asyncio.run(flood("127.0.0.1", port, b"GET / HTTP/1.1\r\n\r\n", 3))
    assert counts(outcomes) == {"transport: connect refused": 3}
