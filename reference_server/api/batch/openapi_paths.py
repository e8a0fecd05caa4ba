"""The Batch API's part of `GET /openapi.json`: `/v1/files` and `/v1/batches`.

Owns the request schemas (the multipart upload, the create-batch body from `CREATE_FIELDS`) and
the operations with their path and query parameters, so the document lists what the handlers
in files.py and batches.py accept. `reference_server.api.openapi` merges them in.
"""

from __future__ import annotations

from typing import Any

from .batches import (
    CREATE_FIELDS,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_CHARS,
)
from .limits import ENDPOINTS

__all__ = ["batch_paths", "batch_schemas"]

_ERRORS = {
    "400": {"description": "invalid request or a limit exceeded (OpenAI error shape)"},
    "404": {"description": "no such file or batch (OpenAI error shape)"},
}
_OBJECT = {"content": {"application/json": {"schema": {"type": "object"}}}}


def _param(name: str, where: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema,
        "description": description,
    }


def _op(
    summary: str,
    *,
    params: tuple[dict[str, Any], ...] = (),
    body: str | None = None,
    body_type: str = "application/json",
    ok: dict[str, Any] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "responses": {"200": {"description": "OK", **(ok or _OBJECT)}, **_ERRORS},
    }
    if params:
        operation["parameters"] = list(params)
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {body_type: {"schema": {"$ref": f"#/components/schemas/{body}"}}},
        }
    return operation


_AFTER = _param("after", "query", {"type": "string"}, "the id to list after (pagination cursor)")
_FILE_ID = _param("file_id", "path", {"type": "string"}, "a file id (file-...)")
_BATCH_ID = _param("batch_id", "path", {"type": "string"}, "a batch id (batch_...)")


def batch_schemas(*, strict: bool) -> dict[str, Any]:
    metadata = {
        "type": ["object", "null"],
        "maxProperties": MAX_METADATA_KEYS,
        "propertyNames": {"maxLength": MAX_METADATA_KEY_CHARS},
        "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE_CHARS},
    }
    fields = {
        "input_file_id": {"type": "string"},
        "endpoint": {"enum": list(ENDPOINTS)},
        "completion_window": {
            "type": "string",
            "description": '"24h" as with OpenAI; this server also takes hours, minutes or '
            'seconds ("1h", "30m", "90s") up to --batch-max-completion-window-seconds',
        },
        "metadata": metadata,
        "output_expires_after": {"type": "object"},
    }
    return {
        "BatchCreateRequest": {
            "type": "object",
            "properties": {name: fields.get(name, {}) for name in CREATE_FIELDS},
            "required": ["input_file_id", "endpoint", "completion_window"],
            "additionalProperties": not strict,
        },
        "FileUpload": {
            "type": "object",
            "properties": {
                "file": {"type": "string", "format": "binary", "description": "JSONL lines"},
                "purpose": {"const": "batch"},
            },
            "required": ["file", "purpose"],
        },
    }


def batch_paths() -> dict[str, Any]:
    limit = _param("limit", "query", {"type": "integer", "minimum": 1}, "page size")
    return {
        "/v1/files": {
            "post": _op(
                "upload a JSONL file of batch requests",
                body="FileUpload",
                body_type="multipart/form-data",
            ),
            "get": _op(
                "list files",
                params=(
                    _AFTER,
                    limit,
                    _param("order", "query", {"enum": ["asc", "desc"]}, "by creation time"),
                    _param("purpose", "query", {"type": "string"}, "only files of this purpose"),
                ),
            ),
        },
        "/v1/files/{file_id}": {
            "get": _op("a file's metadata", params=(_FILE_ID,)),
            "delete": _op(
                "delete a file (refused while an unfinished job reads it)", params=(_FILE_ID,)
            ),
        },
        "/v1/files/{file_id}/content": {
            "get": _op(
                "a file's content (input, output or error JSONL)",
                params=(_FILE_ID,),
                ok={"content": {"application/jsonl": {"schema": {"type": "string"}}}},
            )
        },
        "/v1/batches": {
            "post": _op("create a batch job from an uploaded file", body="BatchCreateRequest"),
            "get": _op("list batch jobs, newest first", params=(_AFTER, limit)),
        },
        "/v1/batches/{batch_id}": {"get": _op("a batch job", params=(_BATCH_ID,))},
        "/v1/batches/{batch_id}/cancel": {
            "post": _op("cancel a batch job (finished lines are kept)", params=(_BATCH_ID,))
        },
    }
