"""The Starlette application: routes, body limits, auth and error rendering in one place.

Owns `ServerState` (engine handle, configs, metrics, embeddings batcher, drain flag, in-flight
count) and `build_app`, which wires every endpoint of docs/server.md. Handlers stay thin: parsing
lives in protocol.py and tokenization.py, completion serving in generation.py, admin in
admin.py, the OpenAPI document in openapi.py. Unknown request fields a non-strict server ignored
are logged here, one warning line per request. Every error any handler raises is rendered as
OpenAI's error JSON; nothing a client sends produces a 500. It knows nothing about sockets,
signals or process lifetime (serve.py).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from reference_server.api import admin
from reference_server.api import batch as batch_api
from reference_server.api.auth import check_api_key
from reference_server.api.bodies import json_response, read_json_body
from reference_server.api.disconnects import client_disconnected, log_client_gone
from reference_server.api.embedding_batcher import (
    BatcherClosedError,
    BatcherFullError,
    EmbeddingBatcher,
)
from reference_server.api.errors import (
    APIError,
    error_response,
    from_engine_error,
    retry_after_header,
)
from reference_server.api.fairness import ClientShares
from reference_server.api.generation import ClientGone, run_generation, until_disconnect
from reference_server.api.metrics import CONTENT_TYPE, ServerMetrics
from reference_server.api.openapi import openapi_document
from reference_server.api.protocol import (
    RequestLimits,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
)
from reference_server.api.server_config import ServerConfig
from reference_server.api.sse import RAW_SEND_KEY
from reference_server.api.tokenization import detokenize, tokenize
from reference_server.errors import EngineError

__all__ = ["ServerState", "build_app", "build_state"]

logger = logging.getLogger("reference_server.api")
_PACKAGE_VERSION = "0.1.0"
# One ignored-fields log line stays short whatever the body holds.
_MAX_LOGGED_FIELDS = 16
_MAX_LOGGED_FIELD_CHARS = 64


@dataclass(kw_only=True)
class ServerState:
    engine: Any  # AsyncEngine (or anything with its interface)
    config: ServerConfig
    metrics: ServerMetrics
    limits: RequestLimits
    model_name: str
    batcher: EmbeddingBatcher
    version: str = _PACKAGE_VERSION
    started_at: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    num_in_flight: int = 0
    batch_api: batch_api.BatchAPI | None = None  # opened and closed by the server's lifespan
    shares: ClientShares | None = None  # per-client fairness of completions (fairness.py)

    def request_done(self) -> None:
        self.num_in_flight -= 1


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("batchgate")
    except Exception:  # not installed as a distribution (plain checkout)
        return _PACKAGE_VERSION


def build_state(
    engine: Any,
    config: ServerConfig,
    *,
    memory_fn: Callable[[], dict[str, int]],
    device: str,
) -> ServerState:
    engine_config = engine.config
    tokenizer = engine.tokenizer
    model_name = config.served_model_name or engine_config.model
    version = _version()

    def info() -> dict[str, str]:
        policy = engine.get_batching().get("policy", "")
        return {"model": model_name, "policy": policy, "device": device, "version": version}

    metrics = ServerMetrics(stats_fn=engine.stats, memory_fn=memory_fn, info_fn=info)
    batcher = EmbeddingBatcher(
        embed_fn=engine.embed,
        max_batch_size=config.embedding_max_batch_size,
        max_wait_ms=config.embedding_max_wait_ms,
        dispatch_threshold=config.embedding_dispatch_threshold,
        max_pending_inputs=config.embedding_max_pending_inputs,
        on_batch=lambda size: metrics.observe_embedding_batch(size=size),
    )
    limits = RequestLimits(
        max_model_len=engine_config.max_model_len,
        max_tokens_cap=engine_config.max_tokens_cap,
        vocab_size=tokenizer.vocab_size,
        default_max_tokens=config.default_max_tokens,
        default_thinking_tokens=config.default_thinking_tokens,
        max_stop_sequences=config.max_stop_sequences,
        max_stop_sequence_chars=config.max_stop_sequence_chars,
        max_messages=config.max_messages,
        request_timeout_seconds=config.request_timeout_seconds,
        embedding_max_inputs_per_request=config.embedding_max_inputs_per_request,
    )
    state = ServerState(
        engine=engine,
        config=config,
        metrics=metrics,
        limits=limits,
        model_name=model_name,
        batcher=batcher,
        version=version,
    )
    state.shares = ClientShares(
        enabled=config.client_fairness,
        share_ratio=config.client_share_ratio,
        capacity_fn=lambda: engine.get_batching()["max_num_seqs"],
    )
    state.batch_api = batch_api.BatchAPI(
        config=config, engine=engine, batcher=batcher, metrics=metrics, request_limits=limits,
        model_name=model_name, is_draining=lambda: state.draining,
    )  # fmt: skip
    return state


def _log_ignored(endpoint: str, fields: tuple[str, ...]) -> None:
    """One warning per request naming the unknown fields it sent (vLLM logs the same)."""
    if not fields:
        return
    shown = [repr(name[:_MAX_LOGGED_FIELD_CHARS]) for name in fields[:_MAX_LOGGED_FIELDS]]
    more = len(fields) - len(shown)
    logger.warning(
        "%s: ignored unknown request fields: %s%s",
        endpoint,
        ", ".join(shown),
        f" (and {more} more)" if more else "",
    )


def _check_serving(state: ServerState) -> None:
    if state.draining:
        raise APIError(
            503,
            "server is draining (shutting down); retry on another replica",
            type="service_unavailable",
            code="draining",
            headers={"Retry-After": "1"},
        )
    if not state.engine.is_alive():
        raise APIError(503, "engine is not running", type="service_unavailable", code="engine_dead")


def _bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    return header.partition(" ")[2].strip() or None if header else None


def _check_model(state: ServerState, model: str | None) -> None:
    if model is not None and model != state.model_name:
        raise APIError(
            404,
            f"model '{model}' does not exist; this server serves '{state.model_name}'",
            param="model",
            code="model_not_found",
        )


def _completions(endpoint: str) -> Callable[[Request], Awaitable[Response]]:
    parse = parse_chat_request if endpoint == "chat" else parse_completion_request
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"

    async def handle(request: Request) -> Response:
        state: ServerState = request.app.state.server
        check_api_key(request, state.config.api_key)
        _check_serving(state)
        body = await read_json_body(request, state.config)
        parsed = parse(
            body,
            tokenizer=state.engine.tokenizer,
            limits=state.limits,
            header_priority=request.headers.get("x-priority"),
            strict=state.config.strict,
        )
        _log_ignored(path, parsed.ignored_fields)
        _check_model(state, parsed.model)
        shares = state.shares
        ticket = None
        if shares is not None:
            key = shares.client_key(request, _bearer_token(request))
            try:
                ticket = shares.admit(key)
            except APIError:
                state.metrics.count_rejection("client_over_share")
                raise
            try:
                await ticket.settle()
            except BaseException:  # cancelled while waiting: give the place back
                shares.release(ticket)
                raise

        def on_done() -> None:
            if ticket is not None and shares is not None:
                shares.release(ticket)
            state.request_done()

        state.num_in_flight += 1
        result = await run_generation(
            engine=state.engine,
            request=parsed,
            model=state.model_name,
            metrics=state.metrics,
            receive=request.receive,
            on_done=on_done,
            stall_timeout_seconds=state.config.stream_stall_timeout_seconds,
            ticket=ticket,
        )
        if result is None:  # client gone; nobody reads this
            log_client_gone(request, "before the answer of")
            return Response(status_code=204)
        if isinstance(result, dict):
            return json_response(result)
        return result  # type: ignore[return-value]

    return handle


async def embeddings(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state.config.api_key)
    _check_serving(state)
    body = await read_json_body(request, state.config)
    parsed = parse_embedding_request(
        body, tokenizer=state.engine.tokenizer, limits=state.limits, strict=state.config.strict
    )
    _log_ignored("/v1/embeddings", parsed.ignored_fields)
    _check_model(state, parsed.model)
    started = time.monotonic()
    try:
        vectors = await until_disconnect(request.receive, state.batcher.embed(parsed.inputs))
    except ClientGone:
        log_client_gone(request, "before the answer of")
        return Response(status_code=204)
    except BatcherFullError as exc:
        state.metrics.count_rejection("embedding_queue_full")
        raise APIError(
            429,
            "embedding queue is full; retry later",
            type="rate_limit_exceeded",
            code="queue_full",
            headers=retry_after_header(exc.retry_after_seconds),
        ) from None
    except BatcherClosedError:
        raise APIError(503, "server is shutting down", type="service_unavailable") from None
    state.metrics.observe_embedding_request(latency_seconds=time.monotonic() - started)
    data = []
    for index, vector in enumerate(vectors):
        if parsed.encoding_format == "base64":
            import numpy as np

            encoded: Any = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
        else:
            encoded = vector
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    num_tokens = sum(len(ids) for ids in parsed.inputs)
    return json_response(
        {
            "object": "list",
            "data": data,
            "model": state.model_name,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        }
    )


async def models(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state.config.api_key)
    card = {
        "id": state.model_name,
        "object": "model",
        "created": state.started_at,
        "owned_by": "batchgate",
        "max_model_len": state.limits.max_model_len,
    }
    return json_response({"object": "list", "data": [card]})


async def tokenize_endpoint(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state.config.api_key)
    body = await read_json_body(request, state.config)
    parsed = tokenize(
        body,
        tokenizer=state.engine.tokenizer,
        max_messages=state.limits.max_messages,
        strict=state.config.strict,
    )
    _log_ignored("/tokenize", parsed.ignored_fields)
    _check_model(state, parsed.model)
    return json_response(parsed.body(state.limits.max_model_len))


async def detokenize_endpoint(request: Request) -> Response:
    state: ServerState = request.app.state.server
    check_api_key(request, state.config.api_key)
    body = await read_json_body(request, state.config)
    parsed = detokenize(body, tokenizer=state.engine.tokenizer, strict=state.config.strict)
    _log_ignored("/detokenize", parsed.ignored_fields)
    _check_model(state, parsed.model)
    return json_response(parsed.body())


async def version(request: Request) -> Response:
    return json_response({"version": request.app.state.server.version})


async def openapi(request: Request) -> Response:
    state: ServerState = request.app.state.server
    return json_response(openapi_document(version=state.version, strict=state.config.strict))


async def health(request: Request) -> Response:
    state: ServerState = request.app.state.server
    if state.draining:
        return json_response({"status": "draining"}, status_code=503)
    if not state.engine.is_alive():
        return json_response({"status": "engine_dead"}, status_code=503)
    return json_response({"status": "ok"})


async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.server
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    if exc.status_code in (400, 408, 413):
        state: ServerState = request.app.state.server
        reason = {400: "invalid_request", 408: "body_timeout", 413: "body_too_large"}
        state.metrics.count_rejection(reason[exc.status_code])
    elif exc.code == "draining":
        request.app.state.server.metrics.count_rejection("draining")
    return error_response(exc)


async def _engine_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EngineError)
    return error_response(from_engine_error(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        error = APIError(404, f"no route {request.url.path}", code="not_found")
    elif exc.status_code == 405:
        error = APIError(405, f"method {request.method} not allowed here", code="bad_method")
    else:
        error = APIError(exc.status_code, str(exc.detail), code="http_error")
    return error_response(error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error serving %s %s", request.method, request.url.path)
    error = APIError(500, "internal server error", type="server_error", code="internal_error")
    return error_response(error)


class _App(Starlette):
    """Starlette that keeps the server's unwrapped `send` in the scope for SSE bodies."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[RAW_SEND_KEY] = send
        await super().__call__(scope, receive, send)


def build_app(state: ServerState, *, lifespan: Any = None) -> Starlette:
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", _completions("chat"), methods=["POST"]),
        Route("/v1/completions", _completions("completions"), methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/tokenize", tokenize_endpoint, methods=["POST"]),
        Route("/detokenize", detokenize_endpoint, methods=["POST"]),
        Route("/version", version, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *admin.routes(),
        *batch_api.routes(),
    ]
    app = _App(
        routes=routes,
        exception_handlers={
            APIError: _api_error,
            EngineError: _engine_error,
            HTTPException: _http_error,
            ClientDisconnect: client_disconnected,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    app.state.server = state
    return app
