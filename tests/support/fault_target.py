"""A plain OpenAI-compatible streaming target whose faults a test switches on mid-run.

Serves POST /v1/chat/completions and /v1/completions (streamed SSE, with a final usage chunk and
`data: [DONE]`), GET /v1/models and GET /health on 127.0.0.1, port 0, in a thread of the test.
It has no /metrics (kind `openai`), so runs against it judge client-side gates only. Faults,
set with `FaultTarget.set(...)` at any time:

- `health_delay_seconds`: /health answers only after this long (a saturated server's health);
- `freeze`: every request, /health included, is accepted and never answered (a hung server);
- `stream_fault`: `malformed_sse` (a data line that is not JSON after the first token),
  `stall_mid_stream` (the stream stops after its first token, the connection stays open),
  `close_mid_body` (the connection is closed after the first token, chunked body unfinished);
- `stop()`: the listening socket closes, so new connections are refused (a dead server).

It counts the completion requests it saw. Stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FaultTarget"]

STREAM_FAULTS = ("none", "malformed_sse", "stall_mid_stream", "close_mid_body")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up mid-answer are what these tests are about


class FaultTarget:
    def __init__(self, *, ttft_seconds: float = 0.02, itl_seconds: float = 0.02, tokens: int = 24):
        self.ttft_seconds = ttft_seconds
        self.itl_seconds = itl_seconds
        self.tokens = tokens
        self.health_delay_seconds = 0.0
        self.freeze = False
        self.stream_fault = "none"
        self.completions = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def set(self, **changes: Any) -> None:
        if changes.get("stream_fault", "none") not in STREAM_FAULTS:
            raise ValueError(f"stream_fault must be one of {STREAM_FAULTS}")
        with self._lock:
            for key, value in changes.items():
                if not hasattr(self, key) or key.startswith("_"):
                    raise ValueError(f"no option {key!r}")
                setattr(self, key, value)

    def stop(self) -> None:
        """Die: close the listening socket (new connections are refused) and every open
        connection (keep-alive ones included), releasing every hang."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                conn.shutdown(socket.SHUT_RDWR)

    def _hang(self) -> None:
        while self.freeze and not self._stopping.wait(0.05):
            pass

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with target._lock:
                    target._connections.add(self.connection)

            def finish(self) -> None:
                with target._lock:
                    target._connections.discard(self.connection)
                with contextlib.suppress(OSError):  # the peer is gone: nothing to flush
                    super().finish()

            def _json(self, status: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                target._hang()
                if self.path == "/health":
                    if target.health_delay_seconds > 0:
                        target._stopping.wait(target.health_delay_seconds)
                    self._json(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "fault-model"}]})
                else:
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                target._hang()
                if self.path not in ("/v1/chat/completions", "/v1/completions"):
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})
                    return
                with target._lock:
                    target.completions += 1
                body = json.loads(raw or b"{}")
                self._stream(self.path.endswith("chat/completions"), body)

            def _chunk(self, payload: bytes) -> None:
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()

            def _event(self, obj: Any) -> None:
                self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

            def _stream(self, chat: bool, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                fault = target.stream_fault
                tokens = max(1, min(int(body.get("max_tokens") or target.tokens), target.tokens))
                start = time.monotonic()
                for i in range(tokens):
                    _sleep_until(start + target.ttft_seconds + i * target.itl_seconds)
                    if target.freeze:
                        target._hang()
                    if i == 1 and fault == "malformed_sse":
                        self._chunk(b"data: {not json\n\n")
                        continue
                    if i == 1 and fault == "stall_mid_stream":
                        target._stopping.wait(3600)
                        return
                    if i == 1 and fault == "close_mid_body":
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    last = i == tokens - 1
                    choice: dict[str, Any] = {
                        "index": 0,
                        "finish_reason": "length" if last else None,
                    }
                    if chat:
                        choice["delta"] = {"content": "a"}
                    else:
                        choice["text"] = "a"
                    self._event({"object": "chunk", "choices": [choice]})
                usage = {
                    "prompt_tokens": 8,
                    "completion_tokens": tokens,
                    "total_tokens": 8 + tokens,
                }
                self._event({"object": "chunk", "choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

        return Handler


def _sleep_until(at: float) -> None:
    left = at - time.monotonic()
    if left > 0:
        time.sleep(left)
