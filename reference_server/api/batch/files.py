"""The `/v1/files` endpoints: upload (multipart, `purpose=batch`), list, retrieve, content,
delete; and OpenAI's file object.

Owns the upload path: the body streams through the multipart reader into a temporary file in
the data directory while its bytes and non-blank lines are counted, so the file-size and
line-count limits refuse an upload as soon as it passes them (errors name the flag), and the
file is fsynced before its row is committed. It knows nothing about jobs beyond refusing to
delete a file an unfinished job still reads.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from reference_server.api.auth import check_api_key
from reference_server.api.bodies import json_response
from reference_server.api.errors import APIError

from .limits import limit_error
from .multipart import MultipartError, boundary_of, read_multipart
from .service import BatchAPI

__all__ = ["file_object", "page_query", "routes", "service_of"]

# Multipart framing around the file: boundaries, part headers, the purpose field.
_ENVELOPE_SLACK_BYTES = 64 * 1024
_PURPOSES = ("batch",)


def service_of(request: Request, *, writes: bool = False) -> BatchAPI:
    state = request.app.state.server
    check_api_key(request, state.config.api_key)
    if writes and state.draining:
        raise APIError(
            503, "server is draining (shutting down); retry on another replica",
            type="service_unavailable", code="draining", headers={"Retry-After": "1"},
        )  # fmt: skip
    service = getattr(state, "batch_api", None)
    if service is None:
        raise APIError(404, f"no route {request.url.path}", code="not_found")
    return service


def file_object(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "file",
        "bytes": row["bytes"],
        "created_at": int(row["created_at"]),
        "expires_at": int(row["expires_at"]) if row["expires_at"] is not None else None,
        "filename": row["filename"],
        "purpose": row["purpose"],
        "status": "processed",
        "status_details": None,
    }


def page_query(request: Request, *, max_limit: int, default_limit: int) -> tuple[str | None, int]:
    after = request.query_params.get("after") or None
    raw = request.query_params.get("limit")
    if raw is None:
        return after, default_limit
    try:
        limit = int(raw)
    except ValueError:
        raise APIError.invalid("limit", f"must be an integer, got {raw!r}") from None
    if not 1 <= limit <= max_limit:
        raise APIError.invalid("limit", f"must be between 1 and {max_limit}, got {limit}")
    return after, limit


class _Counter:
    """Writes the file part to disk, counting bytes and non-blank lines against the limits."""

    def __init__(self, handle: Any, *, max_bytes: int, max_lines: int) -> None:
        self._handle = handle
        self._max_bytes = max_bytes
        self._max_lines = max_lines
        self.num_bytes = 0
        self.num_lines = 0
        self._line_has_text = False

    def __call__(self, data: bytes) -> None:
        self.num_bytes += len(data)
        if self.num_bytes > self._max_bytes:
            raise _too_large(self._max_bytes)
        start = 0
        while True:
            end = data.find(b"\n", start)
            piece = data[start:] if end < 0 else data[start:end]
            if piece.strip():
                self._line_has_text = True
            if end < 0:
                break
            self._end_line()
            start = end + 1
        self._handle.write(data)

    def _end_line(self) -> None:
        if self._line_has_text:
            self.num_lines += 1
            if self.num_lines > self._max_lines:
                raise limit_error(
                    param="file", code="too_many_lines",
                    message="the file has more non-blank lines than this server accepts",
                    flag="--batch-max-file-lines", limit=self._max_lines,
                )  # fmt: skip
        self._line_has_text = False

    def finish(self) -> None:
        self._end_line()


def _too_large(limit: int) -> APIError:
    return limit_error(
        param="file", code="file_too_large", message="the file is larger than this server accepts",
        flag="--batch-max-file-bytes", limit=limit, status_code=413,
    )  # fmt: skip


async def _chunks(request: Request, idle_timeout_seconds: float) -> AsyncIterator[bytes]:
    # A 500 MB upload may take longer than --body-read-timeout-seconds in all; the timeout
    # bounds each wait for the next chunk instead, so a stalled client is still cut off.
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), idle_timeout_seconds)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise APIError(408, "request body not received in time", code="timeout") from None
        yield chunk


async def create_file(request: Request) -> Response:
    service = service_of(request, writes=True)
    store = service.store
    limits = service.limits
    declared = request.headers.get("content-length")
    too_long = limits.max_file_bytes + _ENVELOPE_SLACK_BYTES
    if declared is not None and declared.isdigit() and int(declared) > too_long:
        raise _too_large(limits.max_file_bytes)
    try:
        boundary = boundary_of(request.headers.get("content-type"))
    except MultipartError as exc:
        raise APIError.invalid("body", str(exc), code="invalid_multipart") from None
    tmp = store.upload_path()
    try:
        with open(tmp, "wb") as handle:
            counter = _Counter(
                handle, max_bytes=limits.max_file_bytes, max_lines=limits.max_file_lines
            )
            try:
                parts = await read_multipart(
                    _chunks(request, service.config.body_read_timeout_seconds),
                    boundary,
                    file_sink=counter,
                )
            except MultipartError as exc:
                raise APIError.invalid("body", str(exc), code="invalid_multipart") from None
            counter.finish()
            handle.flush()
            await asyncio.to_thread(os.fsync, handle.fileno())
        purpose = parts.fields.get("purpose")
        if purpose is None:
            raise APIError.invalid("purpose", "is required", code="missing_required_parameter")
        if purpose not in _PURPOSES:
            raise APIError.invalid(
                "purpose", f"must be 'batch' (the only purpose this server stores), got {purpose!r}"
            )
        if parts.file_field != "file":
            raise APIError.invalid("file", "is required: send the JSONL file as the 'file' part",
                                   code="missing_required_parameter")  # fmt: skip
        row = await service.db(
            store.add_file, tmp, filename=os.path.basename(parts.filename or "") or "upload.jsonl",
            purpose=purpose, num_bytes=counter.num_bytes, num_lines=counter.num_lines,
            retention_seconds=limits.retention_seconds,
        )  # fmt: skip
    finally:
        tmp.unlink(missing_ok=True)  # gone already when the upload was kept
    return json_response(file_object(row))


async def list_files(request: Request) -> Response:
    service = service_of(request)
    after, limit = page_query(request, max_limit=10_000, default_limit=10_000)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError.invalid("order", f"must be 'asc' or 'desc', got {order!r}")
    purpose = request.query_params.get("purpose") or None
    try:
        rows, has_more = await service.db(
            service.store.list_files, purpose=purpose, after=after, limit=limit,
            ascending=order == "asc",
        )  # fmt: skip
    except KeyError:
        raise APIError.invalid("after", f"no file {after!r}") from None
    data = [file_object(row) for row in rows]
    return json_response({
        "object": "list", "data": data, "has_more": has_more,
        "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None,
    })  # fmt: skip


async def _existing(service: BatchAPI, file_id: str) -> dict[str, Any]:
    row = await service.db(service.store.get_file, file_id)
    if row is None:
        raise APIError(404, f"no file {file_id!r}", param="file_id", code="file_not_found")
    return row


async def retrieve_file(request: Request) -> Response:
    service = service_of(request)
    return json_response(file_object(await _existing(service, request.path_params["file_id"])))


async def file_content(request: Request) -> Response:
    service = service_of(request)
    row = await _existing(service, request.path_params["file_id"])
    return FileResponse(service.store.path_of(row["id"]), media_type="application/jsonl")


async def delete_file(request: Request) -> Response:
    service = service_of(request, writes=True)
    file_id = request.path_params["file_id"]
    await _existing(service, file_id)
    user = await service.db(service.store.file_user, file_id)
    if user is not None:
        raise APIError(
            409, f"file {file_id!r} is the input of batch {user!r}, which has not finished; "
            "cancel it first", param="file_id", code="file_in_use",
        )  # fmt: skip
    deleted = await service.db(service.store.delete_file, file_id)
    return json_response({"id": file_id, "object": "file", "deleted": bool(deleted)})


def routes() -> list[Route]:
    return [
        Route("/v1/files", create_file, methods=["POST"]),
        Route("/v1/files", list_files, methods=["GET"]),
        Route("/v1/files/{file_id}", retrieve_file, methods=["GET"]),
        Route("/v1/files/{file_id}", delete_file, methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", file_content, methods=["GET"]),
    ]
