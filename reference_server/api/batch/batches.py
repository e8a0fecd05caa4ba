"""The `/v1/batches` endpoints: create, retrieve, list (cursor pages), cancel; and OpenAI's
batch object.

Owns the create request's checks (input file exists, has purpose batch, is not empty and not
over the per-job request limit; endpoint; completion window; metadata as OpenAI bounds it) and
the status rules a cancel follows (validating / in_progress -> cancelling; cancelling and
cancelled answer as they are; other statuses refuse). Running jobs is the runner's. It knows
nothing about SQLite.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_server.api.bodies import json_response, read_json_body
from reference_server.api.errors import APIError
from reference_server.api.fields import BodyReader, UnknownFields, type_name

from .files import page_query, service_of
from .limits import ENDPOINTS, limit_error, parse_completion_window
from .store import new_id

__all__ = [
    "CREATE_FIELDS",
    "MAX_METADATA_KEYS",
    "MAX_METADATA_KEY_CHARS",
    "MAX_METADATA_VALUE_CHARS",
    "batch_object",
    "routes",
]

CREATE_FIELDS = ("input_file_id", "endpoint", "completion_window", "metadata",
                 "output_expires_after")  # fmt: skip
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


def _ts(value: float | None) -> int | None:
    return int(value) if value is not None else None


def batch_object(row: dict[str, Any], *, model: str) -> dict[str, Any]:
    usage_in, usage_out = row["input_tokens"], row["output_tokens"]
    return {
        "id": row["id"],
        "object": "batch",
        "endpoint": row["endpoint"],
        "model": model,
        "errors": orjson.loads(row["errors"]) if row["errors"] else None,
        "input_file_id": row["input_file_id"],
        "completion_window": row["completion_window"],
        "status": row["status"],
        "output_file_id": row["output_file_id"],
        "error_file_id": row["error_file_id"],
        "created_at": _ts(row["created_at"]),
        "in_progress_at": _ts(row["in_progress_at"]),
        "expires_at": _ts(row["expires_at"]),
        "finalizing_at": _ts(row["finalizing_at"]),
        "completed_at": _ts(row["completed_at"]),
        "failed_at": _ts(row["failed_at"]),
        "expired_at": _ts(row["expired_at"]),
        "cancelling_at": _ts(row["cancelling_at"]),
        "cancelled_at": _ts(row["cancelled_at"]),
        "request_counts": {
            "total": row["total"],
            "completed": row["completed"],
            "failed": row["failed"],
        },
        "usage": {
            "input_tokens": usage_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage_in + usage_out,
        },
        "metadata": orjson.loads(row["metadata"]) if row["metadata"] else None,
    }


def _metadata(reader: BodyReader) -> dict[str, str] | None:
    raw = reader.raw("metadata")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise APIError.invalid("metadata", f"must be an object, got {type_name(raw)}")
    if len(raw) > MAX_METADATA_KEYS:
        raise APIError.invalid("metadata", f"at most {MAX_METADATA_KEYS} keys")
    for key, value in raw.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise APIError.invalid(
                "metadata", f"keys are at most {MAX_METADATA_KEY_CHARS} characters"
            )
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise APIError.invalid(
                f"metadata.{key}",
                f"must be a string of at most {MAX_METADATA_VALUE_CHARS} characters",
            )
    return raw


async def create_batch(request: Request) -> Response:
    service = service_of(request, writes=True)
    state = request.app.state.server
    body = await read_json_body(request, state.config)
    reader = BodyReader(body)
    UnknownFields(strict=state.config.strict).check(reader, CREATE_FIELDS)
    input_file_id = reader.string("input_file_id")
    if input_file_id is None:
        raise APIError.invalid("input_file_id", "is required", code="missing_required_parameter")
    endpoint = reader.string("endpoint")
    if endpoint is None:
        raise APIError.invalid("endpoint", "is required", code="missing_required_parameter")
    if endpoint not in ENDPOINTS:
        raise APIError.invalid(
            "endpoint", f"must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}"
        )
    window = reader.raw("completion_window")
    if window is None:
        raise APIError.invalid(
            "completion_window", "is required", code="missing_required_parameter"
        )
    window_seconds = parse_completion_window(window, service.limits)
    metadata = _metadata(reader)
    store = service.store
    file_row = await service.db(store.get_file, input_file_id)
    if file_row is None:
        raise APIError(
            404, f"input_file_id: no file {input_file_id!r}", param="input_file_id",
            code="file_not_found",
        )  # fmt: skip
    if file_row["purpose"] != "batch":
        raise APIError.invalid(
            "input_file_id", f"file {input_file_id!r} has purpose {file_row['purpose']!r}, not "
            "'batch'",
        )  # fmt: skip
    if file_row["num_lines"] == 0:
        raise APIError.invalid("input_file_id", f"file {input_file_id!r} holds no request")
    if file_row["num_lines"] > service.limits.max_requests_per_job:
        raise limit_error(
            param="input_file_id", code="too_many_requests",
            message=f"the file holds {file_row['num_lines']} requests, more than one job may run",
            flag="--batch-max-requests-per-job", limit=service.limits.max_requests_per_job,
        )  # fmt: skip
    now = time.time()
    row = await service.db(store.add_batch, {
        "id": new_id("batch_"), "endpoint": endpoint, "input_file_id": input_file_id,
        "completion_window": window, "window_seconds": window_seconds,
        "metadata": orjson.dumps(metadata).decode() if metadata is not None else None,
        "status": "validating", "created_at": now, "expires_at": now + window_seconds,
    })  # fmt: skip
    service.runner.submitted(row)
    return json_response(batch_object(row, model=state.model_name))


async def _existing(request: Request) -> tuple[Any, dict[str, Any]]:
    service = service_of(request)
    batch_id = request.path_params["batch_id"]
    row = await service.db(service.store.get_batch, batch_id)
    if row is None:
        raise APIError(404, f"no batch {batch_id!r}", param="batch_id", code="batch_not_found")
    return service, row


async def retrieve_batch(request: Request) -> Response:
    _, row = await _existing(request)
    return json_response(batch_object(row, model=request.app.state.server.model_name))


async def list_batches(request: Request) -> Response:
    service = service_of(request)
    after, limit = page_query(request, max_limit=100, default_limit=20)
    try:
        rows, has_more = await service.db(service.store.list_batches, after=after, limit=limit)
    except KeyError:
        raise APIError.invalid("after", f"no batch {after!r}") from None
    model = request.app.state.server.model_name
    data = [batch_object(row, model=model) for row in rows]
    return json_response({
        "object": "list", "data": data, "has_more": has_more,
        "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None,
    })  # fmt: skip


async def cancel_batch(request: Request) -> Response:
    service, row = await _existing(request)
    if request.app.state.server.draining:
        service_of(request, writes=True)  # raises the draining 503
    if row["status"] in ("validating", "in_progress"):
        moved = await service.db(
            service.store.update_batch, row["id"], status="cancelling",
            cancelling_at=time.time(), only_from=("validating", "in_progress"),
        )  # fmt: skip
        if moved:
            service.runner.cancel(row["id"])
        row = await service.db(service.store.get_batch, row["id"]) or row
    if row["status"] not in ("cancelling", "cancelled"):
        raise APIError(
            409, f"batch {row['id']!r} is {row['status']}; only validating or in_progress "
            "batches can be cancelled", param="batch_id", code="batch_not_cancellable",
        )  # fmt: skip
    return json_response(batch_object(row, model=request.app.state.server.model_name))


def routes() -> list[Route]:
    return [
        Route("/v1/batches", create_batch, methods=["POST"]),
        Route("/v1/batches", list_batches, methods=["GET"]),
        Route("/v1/batches/{batch_id}", retrieve_batch, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", cancel_batch, methods=["POST"]),
    ]
