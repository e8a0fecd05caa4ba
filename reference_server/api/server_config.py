"""The HTTP server's own settings: bind address, auth, body and request limits, drain, embeddings.

Owns `ServerConfig`, the typed, validated, keyword-only value object for everything the HTTP
layer decides. It knows nothing about the engine's settings (those live in `EngineConfig`) and
nothing about argparse (the CLI generates one flag per field from `SERVER_FIELD_HELP` and the
dataclass fields).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ENGINE_CORE_PLACEMENTS",
    "LOG_LEVELS",
    "SERVER_FIELD_HELP",
    "ServerConfig",
    "ServerConfigError",
]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# Where the engine's step loop runs: its own process (the default; HTTP and stepping do not share
# a GIL) or a thread of the API process (one process to debug or profile).
ENGINE_CORE_PLACEMENTS = ("process", "thread")


class ServerConfigError(ValueError):
    """A server setting is invalid; `.field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    port_file: str | None = None
    api_key: str | None = None
    admin_token: str | None = None
    served_model_name: str | None = None
    max_body_bytes: int = 1_048_576
    body_read_timeout_seconds: float = 30.0
    request_timeout_seconds: float = 600.0
    drain_timeout_seconds: float = 30.0
    default_max_tokens: int = 256
    # Thinking mode: reasoning tokens of a request that turns thinking on without giving
    # thinking_tokens (reasoning_effort low / medium / high: x0.5 / x1 / x2; docs/server.md).
    default_thinking_tokens: int = 32
    max_stop_sequences: int = 4
    max_stop_sequence_chars: int = 256
    max_messages: int = 1024
    strict: bool = False
    max_connections: int = 2048
    # None: max_connections. A load generator is one host (docs/server.md, "Connection limits")
    max_connections_per_client: int | None = None
    keep_alive_timeout_seconds: float = 5.0
    header_timeout_seconds: float = 10.0
    max_header_bytes: int = 32_768
    max_header_count: int = 100
    stream_stall_timeout_seconds: float = 30.0
    client_fairness: bool = True
    client_share_ratio: float | None = None  # None: an equal split across active clients
    trusted_proxies: str | None = None
    embedding_max_batch_size: int = 32
    embedding_max_wait_ms: float = 5.0
    embedding_dispatch_threshold: int | None = 8
    embedding_max_pending_inputs: int = 1024
    embedding_max_inputs_per_request: int = 128
    log_level: str = "info"
    access_log: bool = False
    engine_core: str = "process"
    # Batch API (/v1/files, /v1/batches). Defaults: the seeds' figures (docs/server.md).
    data_dir: str | None = None
    batch_max_inflight: int | None = None
    batch_max_file_lines: int = 50_000
    batch_max_file_bytes: int = 500 * 1_048_576
    batch_max_line_bytes: int = 1_048_576
    batch_max_requests_per_job: int = 50_000
    batch_max_completion_window_seconds: float = 86_400.0
    batch_retention_seconds: float = 259_200.0

    def __post_init__(self) -> None:
        _check_int(self, "port", low=0, high=65535)
        _check_positive_int(self, "max_body_bytes")
        _check_positive_float(self, "body_read_timeout_seconds")
        _check_positive_float(self, "request_timeout_seconds")
        _check_float(self, "drain_timeout_seconds", low=0.0)
        _check_positive_int(self, "default_max_tokens")
        _check_int(self, "default_thinking_tokens", low=0, high=1_000_000)
        _check_int(self, "max_stop_sequences", low=0, high=1024)
        _check_positive_int(self, "max_stop_sequence_chars")
        _check_positive_int(self, "max_messages")
        _check_positive_int(self, "max_connections")
        if self.max_connections_per_client is not None:
            _check_int(self, "max_connections_per_client", low=1, high=self.max_connections)
        _check_positive_float(self, "keep_alive_timeout_seconds")
        _check_positive_float(self, "header_timeout_seconds")
        _check_int(self, "max_header_bytes", low=1024, high=1_048_576)
        _check_int(self, "max_header_count", low=8, high=10_000)
        _check_positive_float(self, "stream_stall_timeout_seconds")
        if self.client_share_ratio is not None:
            _check_positive_float(self, "client_share_ratio")
            if self.client_share_ratio > 1:
                raise ServerConfigError("client_share_ratio", "must be <= 1 (a share of capacity)")
        if self.trusted_proxies is not None:
            _check_proxies(self.trusted_proxies)
        _check_positive_int(self, "embedding_max_batch_size")
        _check_float(self, "embedding_max_wait_ms", low=0.0)
        if self.embedding_dispatch_threshold is not None:
            _check_positive_int(self, "embedding_dispatch_threshold")
        _check_positive_int(self, "embedding_max_pending_inputs")
        _check_positive_int(self, "embedding_max_inputs_per_request")
        if not isinstance(self.host, str) or not self.host:
            raise ServerConfigError("host", "must be a non-empty string")
        if self.batch_max_inflight is not None:
            _check_positive_int(self, "batch_max_inflight")
        for name in ("batch_max_file_lines", "batch_max_file_bytes", "batch_max_line_bytes",
                     "batch_max_requests_per_job"):  # fmt: skip
            _check_positive_int(self, name)
        _check_positive_float(self, "batch_max_completion_window_seconds")
        _check_positive_float(self, "batch_retention_seconds")
        for name in ("port_file", "api_key", "admin_token", "served_model_name", "data_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ServerConfigError(name, "must be a non-empty string or unset")
        if self.log_level not in LOG_LEVELS:
            raise ServerConfigError("log_level", f"must be one of {', '.join(LOG_LEVELS)}")
        if self.engine_core not in ENGINE_CORE_PLACEMENTS:
            raise ServerConfigError(
                "engine_core", f"must be one of {', '.join(ENGINE_CORE_PLACEMENTS)}"
            )
        for name in ("strict", "access_log", "client_fairness"):
            if not isinstance(getattr(self, name), bool):
                raise ServerConfigError(name, "must be true or false")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ServerConfigError(unknown[0], "unknown server setting")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def client_connection_cap(self) -> int:
        if self.max_connections_per_client is not None:
            return self.max_connections_per_client
        return self.max_connections


def _check_proxies(text: str) -> None:
    """Addresses only: a '*' would make every peer's X-Forwarded-For trusted (issue 15)."""
    if not isinstance(text, str) or not text.strip():
        raise ServerConfigError("trusted_proxies", "must be a comma-separated list of addresses")
    for item in text.split(","):
        try:
            ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise ServerConfigError(
                "trusted_proxies", f"{item.strip()!r} is not an IP address or network"
            ) from None


def _check_int(cfg: ServerConfig, name: str, *, low: int, high: int | None = None) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServerConfigError(name, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ServerConfigError(name, f"must be {bound}, got {value}")


def _check_positive_int(cfg: ServerConfig, name: str) -> None:
    _check_int(cfg, name, low=1)


def _check_float(cfg: ServerConfig, name: str, *, low: float) -> None:
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ServerConfigError(name, f"must be a finite number, got {value!r}")
    if value < low:
        raise ServerConfigError(name, f"must be >= {low}, got {value}")


def _check_positive_float(cfg: ServerConfig, name: str) -> None:
    _check_float(cfg, name, low=0.0)
    if getattr(cfg, name) <= 0:
        raise ServerConfigError(name, "must be > 0")


# One line per field: what it does, with its unit. The CLI appends the default.
SERVER_FIELD_HELP: dict[str, str] = {
    "host": "interface to bind; 127.0.0.1 keeps the server private to this machine",
    "port": "TCP port to listen on; 0 picks a free port (see --port-file)",
    "port_file": "write the bound port number to this file once the server is listening",
    "api_key": "require 'Authorization: Bearer KEY' on /v1/* requests",
    "admin_token": "require 'Authorization: Bearer TOKEN' (or X-Admin-Token) on /admin/*; "
    "without it /admin/* is served to loopback clients only",
    "served_model_name": "model name reported by /v1/models and accepted in requests "
    "(default: the engine's --model)",
    "max_body_bytes": "largest request body accepted, in bytes; larger bodies get 413",
    "body_read_timeout_seconds": "time allowed to receive a request body, in seconds (408 after)",
    "request_timeout_seconds": "wall-time budget of one generation from arrival, in seconds; "
    "the engine ends it with finish_reason 'deadline'",
    "drain_timeout_seconds": "on SIGTERM, seconds to let in-flight requests finish before "
    "aborting them",
    "default_max_tokens": "max_tokens used when a request gives none, in tokens (capped by the "
    "remaining context)",
    "default_thinking_tokens": "thinking mode: reasoning tokens of a request that turns "
    "thinking on without giving thinking_tokens (reasoning_effort low/medium/high: x0.5/x1/x2)",
    "max_stop_sequences": "most stop strings one request may give",
    "max_stop_sequence_chars": "longest stop string accepted, in characters",
    "max_messages": "most chat messages one request may give",
    "strict": "refuse request fields the server does not know (400 unknown_parameter, as "
    "OpenAI does) instead of ignoring them with one log line per request (as vLLM does)",
    "max_connections": "most open HTTP connections; a new one over it closes the longest-idle "
    "keep-alive connection first, else its request is read and answered 503 with Retry-After "
    "(/health and /metrics are still served)",
    "max_connections_per_client": "most open HTTP connections from one client address (behind "
    "--trusted-proxies: requests in progress per X-Forwarded-For client), same rule ('none' = "
    "--max-connections: one load-generator host may use them all)",
    "keep_alive_timeout_seconds": "idle keep-alive connection timeout, in seconds",
    "header_timeout_seconds": "time a connection has to send a complete request head, from "
    "being opened or from its previous response, in seconds (closed after; 408 if partial)",
    "max_header_bytes": "largest request head (request line + headers), in bytes; 431 over it",
    "max_header_count": "most header lines in one request; 431 over it",
    "stream_stall_timeout_seconds": "a stream whose client reads nothing for this long is "
    "aborted (its KV freed) and its connection closed, in seconds",
    "client_fairness": "when the engine's running slots are all taken and other clients are "
    "active, refuse (429) a client over its share of --max-num-seqs and shed its queued "
    "requests; a client is its API key, else its address",
    "client_share_ratio": "share of --max-num-seqs one client may hold under contention "
    "('none' = an equal split across the active clients)",
    "trusted_proxies": "comma-separated addresses of reverse proxies whose X-Forwarded-For / "
    "X-Forwarded-Proto are believed ('none' = never; FORWARDED_ALLOW_IPS is ignored)",
    "embedding_max_batch_size": "embeddings batcher: most inputs in one forward",
    "embedding_max_wait_ms": "embeddings batcher: longest time the first queued input waits for "
    "others before dispatch, in milliseconds",
    "embedding_dispatch_threshold": "embeddings batcher: dispatch at once when this many inputs "
    "are queued (adaptive dispatch; 'none' = off)",
    "embedding_max_pending_inputs": "embeddings batcher: most queued inputs; more get 429",
    "embedding_max_inputs_per_request": "most inputs in one /v1/embeddings request",
    "log_level": "log verbosity: " + ", ".join(LOG_LEVELS),
    "access_log": "log one line per HTTP request",
    "engine_core": "where the engine's step loop runs: process (a child process, the default: "
    "HTTP and stepping do not share one GIL) or thread (inside the API process)",
    "data_dir": "directory for Batch API files and job state (SQLite + files), kept across "
    "restarts; 'none' = a new temporary directory, announced at start",
    "batch_max_inflight": "Batch API: most job lines in the engine (running or waiting) at once, "
    "all jobs together ('none' = 2 x --max-num-seqs, at most --batch-max-waiting, read live)",
    "batch_max_file_lines": "Batch API: most non-blank lines in one uploaded file",
    "batch_max_file_bytes": "Batch API: largest uploaded file, in bytes",
    "batch_max_line_bytes": "Batch API: longest input line, in bytes; a longer line goes to the "
    "error file",
    "batch_max_requests_per_job": "Batch API: most requests (input lines) in one batch job",
    "batch_max_completion_window_seconds": "Batch API: longest completion_window a job may ask "
    "for, in seconds",
    "batch_retention_seconds": "Batch API: how long files and finished jobs are kept, in seconds",
}
