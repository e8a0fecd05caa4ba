"""A controllable fake HTTP target for observer and rollback tests (loopback, port 0).

Routes map (method, path) to a function of the request returning (status, body); a body that
is a dict or list is sent as JSON, a str as text. Every request is recorded.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


Handler = Callable[[Request], tuple[int, Any]]


@dataclass
class FakeTarget:
    url: str = ""
    routes: dict[tuple[str, str], Handler] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def route(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler


def _make_handler(target: FakeTarget) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            pass

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            req = Request(method, parts.path, query, dict(self.headers.items()), body)
            handler = target.routes.get((method, parts.path))
            status, payload = handler(req) if handler else (404, {"error": "not found"})
            # Recorded once answered, so a test that sees it knows the answer is fixed.
            target.requests.append(req)
            if isinstance(payload, (dict, list)):
                data, ctype = json.dumps(payload).encode(), "application/json"
            else:
                data, ctype = str(payload).encode(), "text/plain; version=0.0.4"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_PUT(self) -> None:
            self._serve("PUT")

    return H


@contextlib.contextmanager
def running_target() -> Iterator[FakeTarget]:
    target = FakeTarget()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(target))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    target.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield target
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5.0)


def closed_port_url() -> str:
    """A loopback URL nothing listens on (bound then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
