"""One input line of a batch job: reading it, checking its envelope, running it, and the JSON
line it leaves in the output or error file.

Owns the line format (`{"custom_id", "method", "url", "body"}`), the per-line refusals that go to
the error file with their line number (too long, bad JSON, wrong or unknown `url`, missing
`custom_id`; duplicates are found by the caller), and `LineExecutor`, which serves a body through
the same parsing and engine path as the HTTP handlers — `AsyncEngine.generate` in the
`batch_api_priority` class (batch by default) for completions, the embeddings batcher for
embeddings — and returns OpenAI's output line `{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}`. It knows nothing about jobs, storage or the in-flight bound.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from reference_server.api.embedding_batcher import BatcherClosedError, BatcherFullError
from reference_server.api.errors import APIError, from_engine_error
from reference_server.api.generation import RequestTimer, ResponseShapes
from reference_server.api.protocol import (
    RequestLimits,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
)
from reference_server.errors import AdmissionError, EngineDeadError, EngineError

from .limits import ENDPOINTS

__all__ = [
    "Envelope",
    "LineError",
    "LineExecutor",
    "LineOutcome",
    "NotNow",
    "endings",
    "error_record",
    "iter_lines",
    "read_envelope",
    "refusals",
]

# Fields a batch line's body may not steer: a job is never streamed and always runs in the
# batch class, whatever its lines say.
_OVERRIDDEN_FIELDS = ("stream", "stream_options", "priority")


class LineError(Exception):
    """A line that cannot become a request; it goes to the error file."""

    def __init__(self, code: str, message: str, *, custom_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.custom_id = custom_id


class NotNow(Exception):
    """The engine cannot take the line now (queue full: retry later; draining or dead: leave it
    for the next start). Nothing is recorded."""

    def __init__(self, reason: str, *, retry_after_seconds: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True, slots=True)
class Envelope:
    line: int  # 1-based line number in the input file
    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LineOutcome:
    ok: bool
    record: bytes  # one JSON line, without the newline
    prompt_tokens: int = 0
    output_tokens: int = 0


def iter_lines(path: Path, start_line: int = 1) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line ending) of every non-blank line from `start_line`."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number < start_line:
                continue
            stripped = raw.rstrip(b"\r\n")
            if stripped.strip():
                yield number, stripped


def read_envelope(raw: bytes, line: int, *, endpoint: str, max_line_bytes: int) -> Envelope:
    if len(raw) > max_line_bytes:
        raise LineError(
            "line_too_large",
            f"line {line} is {len(raw)} bytes, over the limit of {max_line_bytes} bytes "
            "(--batch-max-line-bytes)",
        )
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise LineError("invalid_json", f"line {line} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise LineError("invalid_request", f"line {line} is not a JSON object")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise LineError("missing_custom_id", f"line {line}: custom_id must be a non-empty string")
    method = data.get("method", "POST")
    if method != "POST":
        raise LineError(
            "invalid_method", f"line {line}: method must be POST, got {method!r}",
            custom_id=custom_id,
        )  # fmt: skip
    url = data.get("url")
    if url not in ENDPOINTS:
        raise LineError(
            "unknown_endpoint",
            f"line {line}: url {url!r} is not an endpoint jobs can call ({', '.join(ENDPOINTS)})",
            custom_id=custom_id,
        )
    if url != endpoint:
        raise LineError(
            "mismatched_endpoint",
            f"line {line}: url {url!r} differs from the job's endpoint {endpoint!r}",
            custom_id=custom_id,
        )
    body = data.get("body")
    if not isinstance(body, dict):
        raise LineError(
            "invalid_body", f"line {line}: body must be a JSON object", custom_id=custom_id
        )
    return Envelope(line=line, custom_id=custom_id, body=body)


def refusals(
    path: Path, *, endpoint: str, max_line_bytes: int
) -> tuple[int, list[tuple[int, bytes]]]:
    """(lines in the file, [(line, error record)] for each line that cannot run): envelope
    problems and repeated custom_ids (the first use runs, later ones are refused)."""
    seen: set[str] = set()
    refused: list[tuple[int, bytes]] = []
    total = 0
    for line, raw in iter_lines(path):
        total += 1
        try:
            envelope = read_envelope(raw, line, endpoint=endpoint, max_line_bytes=max_line_bytes)
        except LineError as exc:
            refused.append((line, error_record(line, exc.custom_id, exc.code, exc.message)))
            continue
        if envelope.custom_id in seen:
            message = f"line {line}: custom_id {envelope.custom_id!r} is used by an earlier line"
            refused.append(
                (line, error_record(line, envelope.custom_id, "duplicate_custom_id", message))
            )
        seen.add(envelope.custom_id)
    return total, refused


def endings(
    path: Path, done: set[int], code: str, message: str
) -> tuple[int, list[tuple[int, bytes]]]:
    """(lines in the file, [(line, error record)] for each line not in `done`): what an expired
    or cancelled job reports for the lines it never ran."""
    ended: list[tuple[int, bytes]] = []
    total = 0
    lines = iter_lines(path) if path.exists() else iter(())
    for line, raw in lines:
        total += 1
        if line in done:
            continue
        custom_id = None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("custom_id"), str):
            custom_id = data["custom_id"]
        ended.append((line, error_record(line, custom_id, code, message)))
    return total, ended


def _record(record_id: str, custom_id: str | None, response: Any, error: Any) -> bytes:
    return orjson.dumps(
        {"id": record_id, "custom_id": custom_id, "response": response, "error": error}
    )


def error_record(
    line: int, custom_id: str | None, code: str, message: str, response: Any = None
) -> bytes:
    error = {"code": code, "message": message, "line": line}
    return _record(f"batch_req_{uuid.uuid4().hex}", custom_id, response, error)


class LineExecutor:
    """Runs envelopes through the server's own request path, in the class the live setting
    `batch_api_priority` names (the batch class unless changed)."""

    def __init__(
        self, *, engine: Any, batcher: Any, limits: RequestLimits, model_name: str,
        metrics: Any, strict: bool,
    ) -> None:  # fmt: skip
        self._engine = engine
        self._batcher = batcher
        self._limits = limits
        self._model_name = model_name
        self._metrics = metrics
        self._strict = strict
        # Record ids: a per-process prefix and a counter. uuid4 per line would read
        # os.urandom, a syscall that hands the GIL to the engine thread for up to 5 ms.
        self._id_prefix = f"batch_req_{uuid.uuid4().hex[:12]}"
        self._ids = itertools.count()

    def _next_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids):012x}"

    async def run(self, endpoint: str, envelope: Envelope) -> LineOutcome:
        body = {k: v for k, v in envelope.body.items() if k not in _OVERRIDDEN_FIELDS}
        try:
            model = body.get("model")
            if model is not None and model != self._model_name:
                raise APIError(
                    404,
                    f"model '{model}' does not exist; this server serves '{self._model_name}'",
                    param="model",
                    code="model_not_found",
                )
            if endpoint == "/v1/embeddings":
                return await self._embed(envelope, body)
            return await self._generate(endpoint, envelope, body)
        except APIError as exc:
            return self._refused(envelope, exc)
        except AdmissionError as exc:
            if exc.reason == "queue_full":
                raise NotNow("queue_full", retry_after_seconds=exc.retry_after_seconds) from None
            if exc.reason == "draining":
                raise NotNow("draining") from None
            return self._refused(envelope, from_engine_error(exc))
        except EngineDeadError:
            raise NotNow("engine_dead") from None
        except EngineError as exc:
            return self._refused(envelope, from_engine_error(exc))

    def _refused(self, envelope: Envelope, exc: APIError) -> LineOutcome:
        response = {
            "status_code": exc.status_code,
            "request_id": f"req_{uuid.uuid4().hex}",
            "body": exc.to_dict(),
        }
        record = error_record(
            envelope.line, envelope.custom_id, exc.code or exc.type, exc.message, response
        )
        return LineOutcome(ok=False, record=record)

    async def _generate(self, endpoint: str, envelope: Envelope, body: dict) -> LineOutcome:
        chat = endpoint == "/v1/chat/completions"
        parse = parse_chat_request if chat else parse_completion_request
        request = parse(
            body,
            tokenizer=self._engine.tokenizer,
            limits=self._limits,
            header_priority=None,
            strict=self._strict,
        )
        shapes = ResponseShapes(request, self._model_name)
        # Read per line: a live change of batch_api_priority applies to the next line.
        priority = self._engine.get_batching().get("batch_api_priority", "batch")
        timer = RequestTimer(self._metrics, priority)
        # stream=False: the answer in one output at the end; a line needs no per-step delivery.
        stream = self._engine.generate(
            shapes.request_id,
            request.prompt_token_ids,
            request.params,
            priority=priority,
            stream=False,
        )
        pieces: list[str] = []
        reasoning: list[str] = []  # thinking mode's reasoning text
        output = None
        try:
            async for output in stream:
                timer.on_output(output)
                pieces.append(output.new_text)
                reasoning.append(output.new_reasoning_text)
        finally:
            await stream.aclose()  # aborts the request when the line was cancelled
            timer.report()
        if output is None or output.finish_reason == "abort":
            raise NotNow("aborted")  # drain timeout: the line runs again at the next start
        response = {
            "status_code": 200,
            "request_id": shapes.request_id,
            "body": shapes.body("".join(pieces), output, "".join(reasoning)),
        }
        return LineOutcome(
            ok=True,
            record=_record(self._next_id(), envelope.custom_id, response, None),
            prompt_tokens=output.num_prompt_tokens,
            output_tokens=output.num_output_tokens,
        )

    async def _embed(self, envelope: Envelope, body: dict) -> LineOutcome:
        request = parse_embedding_request(
            body, tokenizer=self._engine.tokenizer, limits=self._limits, strict=self._strict
        )
        try:
            vectors = await self._batcher.embed(request.inputs)
        except BatcherFullError as exc:
            raise NotNow("queue_full", retry_after_seconds=exc.retry_after_seconds) from None
        except BatcherClosedError:
            raise NotNow("draining") from None
        data = []
        for index, vector in enumerate(vectors):
            encoded: Any = vector
            if request.encoding_format == "base64":
                import numpy as np

                encoded = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        num_tokens = sum(len(ids) for ids in request.inputs)
        response = {
            "status_code": 200,
            "request_id": self._next_id(),
            "body": {
                "object": "list",
                "data": data,
                "model": self._model_name,
                "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
            },
        }
        return LineOutcome(
            ok=True,
            record=_record(self._next_id(), envelope.custom_id, response, None),
            prompt_tokens=num_tokens,
        )
