"""Token chunks written where the engine delivers them (generation._TokenSink): the connection's
writer that needs no await (connections.py, on the installed uvicorn), and a stream whose client
stops reading and then reads on, byte for byte the stream of a client that reads straight
through. Loopback only."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest
from conftest import ServerProcess, launch
from server_testlib import metric, wait_until
from uvicorn.config import Config
from uvicorn.server import ServerState

from reference_server.api.connections import ConnectionGuard, ConnectionLimits, guarded_protocol
from reference_server.api.generation import RequestTimer, ResponseShapes, _TokenSink
from reference_server.api.generation import _events as response_events
from reference_server.api.sse import WRITE_NOW_KEY, EventStreamResponse
from reference_server.outputs import RequestOutput
from reference_server.request_streams import RequestStreams

_LIMITS = ConnectionLimits(
    max_connections=8, max_connections_per_client=8, header_timeout_seconds=30.0,
    max_header_bytes=8192, max_header_count=50,
)  # fmt: skip


def _dechunk(raw: bytes) -> bytes:
    """The body of an HTTP/1.1 response with chunked transfer encoding (to the last chunk)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body
        body, rest = body + rest[:size], rest[size + 2 :]


async def _serve_once(
    app: Any, request: bytes, *, state: ServerState | None = None,
    hang_up_until: asyncio.Event | None = None,
) -> bytes:  # fmt: skip
    """`app` behind the server's own protocol class on a loopback port; one request from a
    client socket; what came back (until the body ended). `state.connections` holds the
    protocol serving it. With `hang_up_until`, the client hangs up once the head has come and
    the server is kept until the app sets that event."""
    config = Config(app=app, lifespan="off", log_level="warning")
    config.load()
    state = state or ServerState()
    protocol = guarded_protocol(ConnectionGuard(_LIMITS))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await writer.drain()
        if hang_up_until is not None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()
            await asyncio.wait_for(hang_up_until.wait(), 60)
            return b""
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            data = await reader.read(65536)
            if not data:
                break
            raw += data
        writer.close()
        return raw
    finally:
        server.close()
        for connection in list(state.connections):
            connection.shutdown()
        await server.wait_closed()


def test_the_servers_protocol_offers_a_writer_that_sends_chunks_only_while_the_response_is_open():
    answers: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        write_now = scope.get(WRITE_NOW_KEY)
        answers["offered"] = write_now is not None
        answers["before start"] = write_now(b"data: early\n\n")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        answers["asked"] = write_now(b"")  # asks only: an empty chunk would end the body
        answers["direct"] = write_now(b"data: direct\n\n")
        await send({"type": "http.response.body", "body": b"data: sent\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        answers["after end"] = write_now(b"data: late\n\n")

    raw = asyncio.run(_serve_once(app, b"GET /s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    assert answers == {"offered": True, "before start": False, "asked": True, "direct": True,
                       "after end": False}  # fmt: skip
    assert _dechunk(raw) == b"data: direct\n\ndata: sent\n\n"


def test_the_writer_refuses_while_the_transport_has_paused_writing_and_once_the_client_left():
    answers: dict[str, Any] = {}
    state = ServerState()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        write_now = scope[WRITE_NOW_KEY]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        (protocol,) = state.connections
        protocol.pause_writing()  # what the transport calls above its high-water mark
        answers["paused"] = write_now(b"data: 1\n\n")
        protocol.resume_writing()
        answers["resumed"] = write_now(b"data: 2\n\n")
        while (await receive())["type"] != "http.disconnect":
            pass
        answers["gone"] = write_now(b"data: 3\n\n")
        seen_gone.set()

    request = b"GET /s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    seen_gone = asyncio.Event()
    asyncio.run(_serve_once(app, request, state=state, hang_up_until=seen_gone))
    assert (answers["paused"], answers["resumed"], answers["gone"]) == (False, True, False)


def test_a_streamed_requests_tokens_go_out_through_its_sink_without_waking_the_response():
    """generation's wiring: the response's iterator arms the sink, the sink writes each token's
    chunk through the protocol's writer, and the iterator wakes only for the first output and
    the finished one."""
    streams = RequestStreams()
    engine = SimpleNamespace(set_sink=streams.set_sink)
    request = SimpleNamespace(endpoint="completions", prompt_token_ids=[1, 2],
                              include_usage=False, continuous_usage=False)  # fmt: skip
    shapes = ResponseShapes(request, "tiny")  # type: ignore[arg-type]
    observed: dict[str, Any] = {}
    metrics = SimpleNamespace(observe_request=lambda **values: observed.update(values))
    timer = RequestTimer(metrics, "interactive")  # type: ignore[arg-type]
    wakeups = 0

    async def counted() -> AsyncIterator[RequestOutput]:
        nonlocal wakeups
        stream = streams.consume(shapes.request_id, stream=True, submit=lambda: None,
                                 abort=lambda: None, is_dead=lambda: False)  # fmt: skip
        async for output in stream:
            wakeups += 1
            yield output

    def output(index: int, finished: bool = False) -> RequestOutput:
        return RequestOutput(
            request_id=shapes.request_id, new_token_ids=[index], new_text=f"<{index}>",
            finished=finished, finish_reason="length" if finished else None,
            num_prompt_tokens=2, num_output_tokens=index + 1, arrival_time=0.0,
            first_scheduled_time=None, first_token_time=None,
        )  # fmt: skip

    async def app(scope: Any, receive: Any, send: Any) -> None:
        stream = counted()
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)
        streams.publish([output(0)])
        sink = _TokenSink(engine, shapes, timer)
        timer.on_output(await first)  # as run_generation does before it hands over
        sink.response = EventStreamResponse(
            response_events(shapes, stream, first.result(), timer, lambda: None, sink.arm)
        )

        async def engine_steps() -> None:
            for index in range(1, 40):
                await asyncio.sleep(0.001)
                streams.publish([output(index)])
            streams.publish([output(40, finished=True)])

        steps = asyncio.ensure_future(engine_steps())
        await sink.response(scope, receive, send)
        await steps

    raw = asyncio.run(_serve_once(app, b"GET /s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    texts = [orjson.loads(block[len(b"data: ") :])["choices"][0]["text"]
             for block in _dechunk(raw).split(b"\n\n")[:-2]]  # fmt: skip
    assert "".join(texts) == "".join(f"<{i}>" for i in range(41))
    assert wakeups == 2  # the first output and the finished one; 39 tokens went by the sink
    # The server-side timings saw every output once: a first token, then one gap per token.
    assert observed["ttft_seconds"] is not None
    assert len(observed["inter_token_seconds"]) == 40


# -- a real server: a client that stops reading, then reads on --------------------------------

# No prefix caching: the second request would find the first's prompt cached, and its usage
# (prompt_tokens_details.cached_tokens) would differ from the stream it is compared with.
_ARGS = [
    "--device", "cpu", "--max-model-len", "4096", "--max-tokens-cap", "4000",
    "--max-num-seqs", "4", "--stream-stall-timeout-seconds", "600", "--no-enable-prefix-caching",
]  # fmt: skip
_BODY = {
    "prompt": "pause and resume", "max_tokens": 3000, "ignore_eos": True, "seed": 11,
    "temperature": 1.0, "stream": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
}  # fmt: skip
# Well over what the kernel's buffers (the server's send buffer is 128 KiB, the client's receive
# buffer a few KiB) and the transport's 64 KiB high-water mark hold together. The engine has
# finished before the client reads a byte, so the rest of such a stream waited in the server's
# own queue: writes paused, the sink refused, and the response's awaited writes took over.
# (The stream is about 500 KiB.)
_PAUSED_BYTES = 384 * 1024


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = launch("patient", _ARGS, tmp_path_factory.mktemp("patient"))
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def _events(body: bytes) -> list[tuple[Any, ...]]:
    """Each event's content: text, finish reason and usage (ids and times differ per request)."""
    events = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block[:200]
        data = block[len(b"data: ") :]
        if data == b"[DONE]":
            events.append(("[DONE]",))
            continue
        chunk = orjson.loads(data)
        choices = chunk["choices"]
        text = choices[0]["text"] if choices else None
        reason = choices[0]["finish_reason"] if choices else None
        events.append((text, reason, orjson.dumps(chunk.get("usage"))))
    return events


def test_a_client_that_stops_reading_and_reads_on_gets_the_same_stream(patient):
    with httpx.Client(base_url=patient.base_url, timeout=120) as client:
        straight = b"".join(client.post("/v1/completions", json=_BODY).iter_bytes())

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", patient.port))
        try:
            body = orjson.dumps(_BODY)
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )

            def generated() -> bool:  # the engine is done: the rest waits in the server
                text = client.get("/metrics").text
                return (
                    metric(text, "batchgate_requests_finished_total", finish_reason="length") >= 2
                    and metric(text, "batchgate_kv_blocks_used") == 0
                )

            assert wait_until(generated, timeout_seconds=300), patient.log()
            raw = _read_response(sock)
        finally:
            sock.close()
    paused = _dechunk(raw)
    assert len(paused) > _PAUSED_BYTES
    assert _events(paused) == _events(straight)
    assert _events(paused)[-1] == ("[DONE]",)
    usage = orjson.loads(_events(paused)[-2][2])
    assert usage["completion_tokens"] == 3000


def _read_response(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    raw = b""
    deadline = time.monotonic() + 120
    while not raw.endswith(b"\r\n0\r\n\r\n") and time.monotonic() < deadline:
        data = sock.recv(65536)
        if not data:
            break
        raw += data
    return raw
