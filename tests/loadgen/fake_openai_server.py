"""A controllable fake OpenAI streaming server for tests and benchmarks (stdlib only).

Owns exact timing (time to first token and inter-token latency, scheduled on absolute times so
per-chunk costs do not drift), injectable faults (HTTP errors, non-JSON error bodies, malformed
SSE, dropped connections, missing [DONE], hangs, broken HTTP), global stalls that freeze every
response, and a /stats endpoint that counts what it saw. It does not tokenize: a "token" is one
content chunk of `--chunk-text` (default one byte, like the bundled server's byte tokenizer).

Run it as a process:
    python tests/loadgen/fake_openai_server.py --port 0 --port-file F --ttft-ms 50 --itl-ms 10
Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
GET /stats, POST /control (JSON with any of the tunable option names, e.g. {"ttft_ms": 5,
"fault": "http_500", "fault_every": 2}, or {"stall_ms": 1000} to stall everything now).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULTS = (
    "none",
    "http_500",
    "http_429",
    "non_json_error",
    "malformed_sse",
    "drop_mid_stream",
    "no_done",
    "cut_before_finish",
    "hang",
    "close_before_headers",
    "bad_http",
)
TUNABLE = (
    "ttft_ms",
    "itl_ms",
    "tokens",
    "chunk_tokens",
    "fault",
    "fault_every",
    "per_chunk_usage",
    "usage",
    "hang_s",
    "reasoning_tokens",
    "reasoning_field",
    "content_ms",
    "vary_under_load",
)
# --strict-fields: the body fields OpenAI's API defines; any other is refused with HTTP 422 and
# FastAPI's {"detail": ...} body, as Hugging Face `transformers serve` does.
OPENAI_FIELDS = frozenset({
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "stream",
    "stream_options", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "stop", "n", "user", "logprobs", "top_logprobs", "response_format", "tools",
    "tool_choice", "echo", "suffix", "best_of",
})  # fmt: skip


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.lock = threading.Lock()
        self.opts: dict[str, Any] = {k: getattr(args, k) for k in TUNABLE}
        self.stall_at_request: int | None = args.stall_at_request
        self.stall_ms: float = args.stall_ms
        self.stall_until = 0.0
        self.requests_total = 0
        self.connections_total = 0
        self.by_path: dict[str, int] = {}
        self.by_fault: dict[str, int] = {}
        self.user_agents: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.ttft_seconds: list[float] = []  # server-side: request read -> first content written
        # server-side, with reasoning: request read -> first reasoning / first answer written
        self.first_reasoning_seconds: list[float] = []
        self.first_content_seconds: list[float] = []
        self.stop = threading.Event()
        self.tokenize: bool = args.tokenize
        self.strict_fields: bool = getattr(args, "strict_fields", False)
        self.refused_fields: dict[str, int] = {}  # field -> requests refused (422) for it

    def admit(self, path: str, user_agent: str = "") -> tuple[int, dict[str, Any], str]:
        """Count a completion request; return its number, a snapshot of options, its fault."""
        with self.lock:
            self.requests_total += 1
            self.user_agents[user_agent] = self.user_agents.get(user_agent, 0) + 1
            n = self.requests_total
            self.by_path[path] = self.by_path.get(path, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            opts = dict(self.opts)
            fault = opts["fault"]
            if fault != "none" and n % max(int(opts["fault_every"]), 1) != 0:
                fault = "none"
            self.by_fault[fault] = self.by_fault.get(fault, 0) + 1
            if self.stall_at_request is not None and n == self.stall_at_request:
                self.stall_until = time.monotonic() + self.stall_ms / 1000.0
        return n, opts, fault

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def wait_stall(self) -> bool:
        """Block while a stall is active; True when it waited."""
        waited = False
        while True:
            left = self.stall_until - time.monotonic()
            if left <= 0 or self.stop.is_set():
                return waited
            waited = True
            time.sleep(min(left, 0.05))

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests_total": self.requests_total,
                "connections_total": self.connections_total,
                "by_path": dict(self.by_path),
                "by_fault": dict(self.by_fault),
                "user_agents": dict(self.user_agents),
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "ttft_seconds": list(self.ttft_seconds[-10000:]),
                "first_reasoning_seconds": list(self.first_reasoning_seconds[-10000:]),
                "first_content_seconds": list(self.first_content_seconds[-10000:]),
                "options": dict(self.opts),
                "refused_fields": dict(self.refused_fields),
            }


def sleep_until(t: float) -> None:
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"
    state: State  # set on the subclass made by serve()

    def setup(self) -> None:
        super().setup()  # applies `timeout`: an idle keep-alive connection is closed after it
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.state.lock:
            self.state.connections_total += 1

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read /stats
        pass

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        elif self.path == "/stats":
            self._json(200, self.state.stats())
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        raw = self._read_body()
        if self.path == "/control":
            self._control(raw)
            return
        if self.path == "/tokenize" and self.state.tokenize:
            # llama.cpp's shape: a word of up to 4 letters (with its leading space) is one
            # token, a longer one two; anything else one token per character.
            text = json.loads(raw or b"{}").get("content", "")
            count = sum(
                (1 if len(w) <= 4 else 2) if w.isalpha() else len(w)
                for w in text.split(" ") if w
            )  # fmt: skip
            self._json(200, {"tokens": list(range(count))})
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if self.state.strict_fields and self._refuse_unknown(raw):
            return
        read_at = time.monotonic()
        _, opts, fault = self.state.admit(self.path, self.headers.get("User-Agent", ""))
        try:
            self._complete(raw, opts, fault, read_at)
        finally:
            self.state.leave()

    def _refuse_unknown(self, raw: bytes) -> bool:
        try:
            unknown = sorted(set(json.loads(raw or b"{}")) - OPENAI_FIELDS)
        except (ValueError, TypeError):
            return False  # not an object: _complete answers it
        if not unknown:
            return False
        with self.state.lock:
            for name in unknown:
                self.state.refused_fields[name] = self.state.refused_fields.get(name, 0) + 1
        self._json(422, {"detail": f"Unexpected fields in the request: {set(unknown)}"})
        return True

    def _control(self, raw: bytes) -> None:
        try:
            changes = json.loads(raw or b"{}")
            unknown = set(changes) - set(TUNABLE) - {"stall_ms"}
            if unknown or changes.get("fault", "none") not in FAULTS:
                raise ValueError(f"unknown option(s) {sorted(unknown)} or fault")
        except ValueError as exc:
            self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        with self.state.lock:
            if "stall_ms" in changes:
                self.state.stall_until = time.monotonic() + float(changes.pop("stall_ms")) / 1000
            self.state.opts.update(changes)
        self._json(200, {"options": self.state.stats()["options"]})

    def _complete(self, raw: bytes, opts: dict[str, Any], fault: str, read_at: float) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
            return
        chat = self.path.endswith("chat/completions")
        n_tokens = int(opts["tokens"] or body.get("max_tokens") or 16)
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if fault == "close_before_headers":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "bad_http":
            self.close_connection = True
            self.wfile.write(b"NOT-HTTP garbage\r\n\r\n")
            return
        if fault == "hang":
            self.close_connection = True
            self.state.stop.wait(float(opts["hang_s"]))
            return
        if fault in ("http_500", "http_429"):
            status = int(fault[5:])
            self._json(status, {"error": {"message": f"injected {status}", "type": "server_error"}})
            return
        if fault == "non_json_error":
            page = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        prompt_tokens = len(json.dumps(body.get("messages") or body.get("prompt") or "").encode())
        due = read_at + float(opts["ttft_ms"]) / 1000.0
        if not stream:
            sleep_until(due + float(opts["itl_ms"]) / 1000.0 * max(n_tokens - 1, 0))
            self.state.wait_stall()
            text = "x" * n_tokens
            choice = (
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n_tokens,
                "total_tokens": prompt_tokens + n_tokens,
            }
            self._json(
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "choices": [choice],
                    **({"usage": usage} if opts["usage"] else {}),
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        if chat:  # role-only first chunk, which must not count as a token
            self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        per_chunk = max(int(opts["chunk_tokens"]), 1)
        itl = float(opts["itl_ms"]) / 1000.0
        sent = 0
        first = True
        thinking = min(int(opts["reasoning_tokens"] or 0), n_tokens) if chat else 0
        field = str(opts["reasoning_field"])
        for _ in range(thinking):  # one reasoning token a chunk, before any answer
            sleep_until(due)
            sent += 1
            chunk = {"choices": [{"index": 0, "delta": {field: "r"}, "finish_reason": None}]}
            if opts["per_chunk_usage"]:
                chunk["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            self._event(chunk)
            if sent == 1:
                with self.state.lock:
                    self.state.first_reasoning_seconds.append(time.monotonic() - read_at)
            due += itl
        if thinking and opts["content_ms"] is not None:
            due = read_at + float(opts["content_ms"]) / 1000.0
        varied = bool(opts["vary_under_load"]) and self.state.in_flight > 1
        while sent < n_tokens:
            k = min(per_chunk, n_tokens - sent)
            sleep_until(due)
            if self.state.wait_stall():
                due = time.monotonic()
            if fault == "malformed_sse" and sent >= 1:
                self._raw(b"data: {this is not json\n\n")
                break
            if fault == "cut_before_finish" and sent >= 2:
                # A body closed cleanly mid-answer: no finish_reason, no usage, no [DONE].
                self.wfile.write(b"0\r\n\r\n")
                return
            if fault in ("drop_mid_stream",) and sent >= 2:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            text = "".join("y" if varied and sent + i >= 3 else "x" for i in range(k))
            sent += k
            last = sent >= n_tokens
            delta = {"content": text}
            choice = {"index": 0, "delta": delta} if chat else {"index": 0, "text": text}
            choice["finish_reason"] = "length" if last else None
            chunk: dict[str, Any] = {"choices": [choice]}
            if opts["per_chunk_usage"]:
                chunk["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            self._event(chunk)
            if first:
                with self.state.lock:
                    if thinking:
                        self.state.first_content_seconds.append(time.monotonic() - read_at)
                    else:
                        self.state.ttft_seconds.append(time.monotonic() - read_at)
                first = False
            due += itl * k
        if include_usage and opts["usage"]:
            self._event(
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sent,
                        "total_tokens": prompt_tokens + sent,
                        "prompt_tokens_details": {"cached_tokens": min(prompt_tokens, 3)},
                        **(
                            {"completion_tokens_details": {"reasoning_tokens": thinking}}
                            if thinking
                            else {}
                        ),
                    },
                }
            )
        if fault != "no_done":
            self._raw(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, obj: dict[str, Any]) -> None:
        self._raw(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

    def _raw(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Fake OpenAI-compatible streaming server: exact timing, fault injection.",
        epilog="Faults: " + ", ".join(FAULTS) + ". Options marked (tunable) can be changed at run "
        'time with POST /control {json}; POST /control {"stall_ms": 1000} stalls every response '
        "for 1 s starting now.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default)")
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="time to first token (tunable)")
    p.add_argument("--itl-ms", type=float, default=10.0, help="time between tokens (tunable)")
    p.add_argument(
        "--tokens",
        type=int,
        default=0,
        help="output tokens per response; 0 = the request's max_tokens (tunable)",
    )
    p.add_argument("--chunk-tokens", type=int, default=1, help="tokens per SSE chunk (tunable)")
    p.add_argument(
        "--no-usage",
        dest="usage",
        action="store_false",
        help="never send usage (clients must count tokens) (tunable as usage)",
    )
    p.add_argument(
        "--per-chunk-usage",
        action="store_true",
        help="send cumulative usage in every chunk, like vLLM continuous stats (tunable)",
    )
    p.add_argument("--fault", choices=FAULTS, default="none", help="inject a fault (tunable)")
    p.add_argument(
        "--fault-every",
        type=int,
        default=1,
        help="inject the fault on every N-th request only (tunable)",
    )
    p.add_argument("--hang-s", type=float, default=30.0, help="how long 'hang' hangs (tunable)")
    p.add_argument(
        "--keepalive-timeout-s",
        type=float,
        default=None,
        help="close connections idle this long (like uvicorn's 5 s); default: never",
    )
    p.add_argument(
        "--stall-at-request",
        type=int,
        default=None,
        help="when the N-th completion request arrives, stall every response",
    )
    p.add_argument("--stall-ms", type=float, default=1000.0, help="length of that stall")
    p.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="chat: stream this many reasoning tokens before the answer, within max_tokens "
        "(tunable)",
    )
    p.add_argument(
        "--reasoning-field",
        default="reasoning_content",
        choices=("reasoning_content", "reasoning"),
        help="delta field of reasoning: vLLM/DeepSeek's reasoning_content or OpenAI-style "
        "reasoning (tunable)",
    )
    p.add_argument(
        "--content-ms",
        type=float,
        default=None,
        help="with reasoning: time from the request to the first answer token (default: one "
        "ITL after the last reasoning token) (tunable)",
    )
    p.add_argument(
        "--vary-under-load",
        action="store_true",
        help="answers change with the company they keep: a request answered while others are "
        "in flight gets 'y' from its 4th character on (a server without batch invariance) "
        "(tunable)",
    )
    p.add_argument(
        "--tokenize", action="store_true", help="serve llama.cpp's POST /tokenize (word counts)"
    )
    p.add_argument(
        "--strict-fields",
        action="store_true",
        help="refuse a body field OpenAI does not define with HTTP 422 (transformers serve)",
    )
    return p


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up mid-response (load tests ending, injected drops) are normal here.
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def serve(args: argparse.Namespace) -> None:
    state = State(args)
    handler = type(
        "BoundHandler", (Handler,), {"state": state, "timeout": args.keepalive_timeout_s}
    )
    server = QuietServer((args.host, args.port), handler)

    def stop(*_: object) -> None:
        state.stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    port = server.server_address[1]
    if args.port_file:
        tmp = Path(f"{args.port_file}.tmp{os.getpid()}")
        tmp.write_text(str(port))
        tmp.replace(args.port_file)
    print(f"fake-openai listening on http://{args.host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()


if __name__ == "__main__":
    serve(build_parser().parse_args())
