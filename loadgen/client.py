"""The OpenAI-compatible client: sends one planned request and times every content chunk.

Owns the request body for `/v1/chat/completions` and `/v1/completions` (streaming or not, with
`stream_options.include_usage` and, when asked, vLLM's `continuous_usage_stats`; less the fields
the target refuses, `drop_fields`), the
interpretation of OpenAI chunks (content vs role-only, per-chunk or final `usage`, finish
reasons, in-stream errors), each content chunk's token count and where it came from
(`chunk_tokens_source`), and the mapping of every failure to a record status with a reason.
It never raises for a server's misbehaviour. It does not know about schedules, workers or
Locust.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.httpconn import (
    ConnectionDropped,
    ConnectionPool,
    HttpConnection,
    ProtocolError,
    Target,
)
from loadgen.plan import PlannedRequest
from loadgen.records import RequestRecord
from loadgen.sse import SSEParser

__all__ = ["ClientConfig", "OpenAIClient", "RequestCancelled"]

_ERROR_BODY_BYTES = 4096


@functools.cache
def user_agent() -> str:
    """`batchgate-loadgen/<version>`: a server's access log, and a packet capture beside another
    client (benchmarks/wire_capture.py), can tell this load from other traffic."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"batchgate-loadgen/{version('batchgate')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "batchgate-loadgen"


class RequestCancelled(Exception):
    """Raised into an in-flight request when the run stops (recorded as `cancelled`)."""


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    model: str
    endpoint: str = "chat"
    stream: bool = True
    api_key: str | None = None
    request_timeout_seconds: float = 60.0
    extra_body: dict[str, Any] | None = None
    # Ask for cumulative usage on every chunk (vLLM's `continuous_usage_stats`), which gives each
    # chunk's real token count. Only for targets known to accept it: a strict OpenAI server
    # refuses unknown stream options (the profile's "auto" is resolved before this point).
    continuous_usage: bool = False
    # Top-level body fields left out of every request (the profile's `drop_fields`: what the
    # target refuses), whoever set them: the profile, the request, a probe.
    drop_fields: frozenset[str] = frozenset()


class _Failure(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class OpenAIClient:
    def __init__(self, target: Target, config: ClientConfig) -> None:
        self.target = target
        self.config = config
        self.pool = ConnectionPool(target, connect_timeout_seconds=config.request_timeout_seconds)
        # Complete streams that ended without `data: [DONE]` (load.json counts them).
        self.streams_without_done = 0

    def close(self) -> None:
        self.pool.close()

    def body(self, req: PlannedRequest) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "max_tokens": req.max_tokens,
            "stream": cfg.stream,
        }
        if req.exact_output:
            # The trace's answer length, not where the model happens to stop (vLLM, SGLang,
            # llama.cpp and the bundled server honour both; docs/traces.md).
            body["min_tokens"] = req.max_tokens
            body["ignore_eos"] = True
        if cfg.endpoint == "chat":
            body["messages"] = [{"role": r, "content": c} for r, c in req.messages]
        else:
            body["prompt"] = req.prompt_text
        if cfg.stream:
            body["stream_options"] = (
                {"include_usage": True, "continuous_usage_stats": True}
                if cfg.continuous_usage
                else {"include_usage": True}
            )
        body.update(cfg.extra_body or {})
        # The request's own fields (thinking mode, sampling parameters, a probe's) win over the
        # profile's: they are what this request is about.
        body.update(req.body or {})
        for name in cfg.drop_fields:
            # Without min_tokens/ignore_eos an exact_output answer may end early; the records
            # show its real length (load.json's `dropped_fields` says why).
            body.pop(name, None)
        return body

    def path(self) -> str:
        leaf = "chat/completions" if self.config.endpoint == "chat" else "completions"
        base = self.target.base_path
        return f"{base}/{leaf}" if base.endswith("/v1") else f"{base}/v1/{leaf}"

    def send(
        self,
        req: PlannedRequest,
        record: RequestRecord,
        *,
        answer: list[str] | None = None,
        before_send: Callable[[], None] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> RequestRecord:
        """Fill `record` (planned_at already set) by sending `req`; never raises for I/O.
        `answer`, when given, receives the answer's text pieces (a chat session's next turn
        repeats them). The open loop's hooks (loadgen/release.py): `before_send` waits, with
        the body built, until the planned instant (`sent_at` is stamped after it);
        `on_written` is called once the request is on the wire, before its answer is read."""
        payload = orjson.dumps(self.body(req))
        headers = {
            "Host": self.target.host_header,
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if self.config.stream else "application/json",
            "X-Priority": req.priority,
            "User-Agent": user_agent(),
        }
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        record.prompt_tokens = req.prompt_tokens
        conn: HttpConnection | None = None
        try:
            if before_send is not None:
                before_send()
            record.sent_at = time.monotonic()
            deadline = record.sent_at + self.config.request_timeout_seconds
            conn, status, resp_headers = self._open(payload, headers, deadline, on_written)
            record.http_status = status
            if status != 200:
                raise _Failure(
                    "http_error", f"HTTP {status}: {self._error_text(conn, resp_headers, deadline)}"
                )
            if self.config.stream and "text/event-stream" in resp_headers.get("content-type", ""):
                self._read_stream(conn, resp_headers, deadline, record, answer)
            else:
                self._read_full(conn, resp_headers, deadline, record, answer)
            record.status, record.error = "ok", None
        except _Failure as exc:
            record.status, record.error = exc.status, exc.reason
        except RequestCancelled:
            record.status, record.error = "cancelled", "cancelled: the run stopped"
        except TimeoutError:
            record.status = "timeout"
            record.error = f"no complete response within {self.config.request_timeout_seconds:g} s"
        except ProtocolError as exc:
            record.status, record.error = "protocol_error", f"bad HTTP: {exc}"
        except (OSError, EOFError) as exc:
            record.status = "connection_error"
            record.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            if record.done_at is None or record.status != "ok":
                record.done_at = time.monotonic() if record.sent_at is not None else None
            if conn is not None:
                if record.status == "ok":
                    self.pool.release(conn)
                else:
                    conn.close()
        if record.output_tokens is None and record.chunk_tokens:
            record.output_tokens = sum(record.chunk_tokens)
        return record

    def _open(
        self,
        payload: bytes,
        headers: dict[str, str],
        deadline: float,
        on_written: Callable[[], None] | None = None,
    ) -> tuple[HttpConnection, int, dict[str, str]]:
        conn = self.pool.acquire()
        try:
            conn.send_request("POST", self.path(), headers, payload)
            if on_written is not None:
                on_written()
            status, resp_headers, _ = conn.read_head(deadline)
            return conn, status, resp_headers
        except BaseException as exc:
            conn.close()
            # Only a reused connection that the server closed while idle is retried; a timeout
            # is the server's answer and is never retried (it would double the load).
            stale = isinstance(exc, (ConnectionDropped, BrokenPipeError, ConnectionResetError))
            if not conn.reused or not stale:
                raise
        # A pooled connection the server had closed: retry once on a fresh one, as browsers do.
        conn = self.pool.acquire(fresh=True)
        try:
            conn.send_request("POST", self.path(), headers, payload)
            status, resp_headers, _ = conn.read_head(deadline)
        except BaseException:
            conn.close()
            raise
        return conn, status, resp_headers

    def _error_text(self, conn: HttpConnection, headers: dict[str, str], deadline: float) -> str:
        body = b""
        try:
            for piece, _ in conn.iter_body(headers, deadline):
                body += piece
                if len(body) >= _ERROR_BODY_BYTES:
                    break
        except (OSError, ProtocolError) as exc:
            body += f" [body unreadable: {exc}]".encode()
        text = body.decode("utf-8", "replace").strip()
        try:
            obj = json.loads(text)
        except ValueError:
            return f"non-JSON error body: {text[:200]!r}" if text else "empty error body"
        if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
            return str(obj["error"].get("message") or obj["error"])[:300]
        if isinstance(obj, dict) and "detail" in obj:
            return str(obj["detail"])[:300]
        return text[:300]

    def _read_stream(
        self,
        conn: HttpConnection,
        headers: dict[str, str],
        deadline: float,
        rec: RequestRecord,
        answer: list[str] | None,
    ) -> None:
        parser = SSEParser()
        done = False
        counted = 0  # tokens given to content chunks so far
        reasoning_counted = 0  # of those, tokens of chunks that carried only reasoning
        last_at: float | None = None
        for piece, at in conn.iter_body(headers, deadline):
            last_at = at
            try:
                events = parser.feed(piece)
            except UnicodeDecodeError as exc:
                raise _Failure(
                    "protocol_error", f"malformed SSE: not UTF-8 ({exc.reason})"
                ) from exc
            for data in events:
                if done:
                    raise _Failure("protocol_error", "malformed SSE: data after [DONE]")
                if data.strip() == "[DONE]":
                    done = True
                    rec.done_at = at
                    continue
                chunk = _parse_chunk(data)
                usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else None
                text, reasoning, finish = _chunk_content(chunk, self.config.endpoint)
                if finish:
                    rec.finish_reason = finish
                if text or reasoning:
                    reported = usage.get("completion_tokens") if usage else None
                    if isinstance(reported, int):
                        # Cumulative count: this chunk carries what was generated since the
                        # tokens already given out (tokens held back without text, e.g. part of
                        # a UTF-8 character, arrive here). Measured against what was given out,
                        # not the last report, so the chunks add up to the report.
                        tokens, source = max(reported - counted, 1), "usage"
                    else:
                        tokens, source = 1, "assumed"
                    if not rec.chunk_tokens:
                        rec.chunk_tokens_source = source
                    elif rec.chunk_tokens_source != source:
                        rec.chunk_tokens_source = "mixed"
                    counted += tokens
                    if answer is not None and text:
                        answer.append(text)
                    # Reasoning and answer chunks are both generated tokens: both time ITL and
                    # TTFT (docs/records.md); each kind's first arrival is kept apart.
                    rec.chunk_times.append(at)
                    rec.chunk_tokens.append(tokens)
                    if rec.first_token_at is None:
                        rec.first_token_at = at
                    if reasoning and rec.first_reasoning_at is None:
                        rec.first_reasoning_at = at
                    if text and rec.first_content_at is None:
                        rec.first_content_at = at
                    if reasoning and not text:
                        reasoning_counted += tokens
                if usage:
                    _apply_usage(rec, usage)
        _settle_reasoning(rec, reasoning_counted)
        if not done:
            if rec.finish_reason is not None and not parser.pending() and last_at is not None:
                # Hugging Face `transformers serve` ends a complete answer (finish_reason and
                # usage sent, the body closed cleanly) without `data: [DONE]`, and the openai
                # SDK reads such a stream without complaint: the answer ended with its body.
                rec.done_at = last_at
                self.streams_without_done += 1
                return
            tail = " (truncated event)" if parser.pending() else ""
            raise _Failure("protocol_error", f"stream ended without [DONE]{tail}")

    def _read_full(
        self,
        conn: HttpConnection,
        headers: dict[str, str],
        deadline: float,
        rec: RequestRecord,
        answer: list[str] | None,
    ) -> None:
        pieces = [piece for piece, _ in conn.iter_body(headers, deadline)]
        body = b"".join(pieces)
        at = rec.done_at = time.monotonic()
        chunk = _parse_chunk(body.decode("utf-8", "replace"), what="response body")
        text, reasoning, finish = _chunk_content(chunk, self.config.endpoint, full=True)
        rec.finish_reason = finish
        if isinstance(chunk.get("usage"), dict):
            _apply_usage(rec, chunk["usage"])
        if reasoning:
            rec.first_reasoning_at = at
        if text:
            rec.first_content_at = at
        if text or reasoning:
            if answer is not None and text:
                answer.append(text)
            rec.first_token_at = at
            rec.chunk_times.append(at)
            # One chunk: the whole answer. Without usage its length in bytes stands in (one
            # token per byte, the bundled server's byte tokenizer) and is marked as assumed.
            if rec.output_tokens:
                rec.chunk_tokens.append(rec.output_tokens)
                rec.chunk_tokens_source = "usage"
            else:
                rec.chunk_tokens.append(len((text + reasoning).encode()))
        _settle_reasoning(rec, len(reasoning.encode()))


def _parse_chunk(data: str, what: str = "SSE data") -> dict[str, Any]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _Failure("protocol_error", f"malformed {what}: not JSON: {data[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise _Failure("protocol_error", f"malformed {what}: not an object: {data[:80]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise _Failure("protocol_error", f"server error inside the response: {str(msg)[:200]}")
    return obj


def _chunk_content(
    chunk: dict[str, Any], endpoint: str, full: bool = False
) -> tuple[str, str, str | None]:
    """(answer text, reasoning text, finish reason) of a chunk or a whole response."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        if "usage" in chunk:
            return "", "", None  # the final usage-only chunk
        raise _Failure("protocol_error", "malformed chunk: no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise _Failure("protocol_error", "malformed chunk: choice is not an object")
    reasoning: object = None
    if endpoint == "chat":
        part = choice.get("message" if full else "delta") or {}
        text = part.get("content") if isinstance(part, dict) else None
        if isinstance(part, dict):
            # vLLM's and DeepSeek's reasoning parsers (and the bundled server) send
            # `reasoning_content`; OpenAI-style servers (and newer vLLM) `reasoning`.
            reasoning = part.get("reasoning_content")
            if not isinstance(reasoning, str) or not reasoning:
                reasoning = part.get("reasoning")
    else:
        text = choice.get("text")
    finish = choice.get("finish_reason")
    return (
        text if isinstance(text, str) else "",
        reasoning if isinstance(reasoning, str) else "",
        finish if isinstance(finish, str) else None,
    )


def _settle_reasoning(rec: RequestRecord, counted: int) -> None:
    """The reasoning token count: the target's own (usage), else the reasoning chunks' tokens
    (0 when none came: nothing was seen to think)."""
    if rec.reasoning_tokens is None:
        rec.reasoning_tokens = counted


def _apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    if isinstance(usage.get("prompt_tokens"), int):
        rec.prompt_tokens = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        rec.output_tokens = usage["completion_tokens"]
        rec.tokens_source = "usage"
    completion = usage.get("completion_tokens_details")
    if isinstance(completion, dict):
        thought = completion.get("reasoning_tokens")
        if isinstance(thought, int) and not isinstance(thought, bool) and thought >= 0:
            rec.reasoning_tokens = thought
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        cached = details.get("cached_tokens")
        if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
            rec.cached_tokens = cached
