"""A streaming `multipart/form-data` reader for file uploads.

Owns splitting a request body into parts as it arrives: small text fields are kept in memory
(bounded), the one file part is handed to a sink chunk by chunk, so a 500 MB upload never sits
in memory. Malformed bodies raise `MultipartError` with a reason. It knows nothing about HTTP
frameworks (it takes an async iterator of byte chunks) or about what the file holds.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

__all__ = ["MultipartError", "MultipartResult", "boundary_of", "read_multipart"]

_MAX_HEADER_BYTES = 16 * 1024
_MAX_FIELD_BYTES = 64 * 1024
_MAX_PARTS = 16
_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')


class MultipartError(ValueError):
    """The body is not the multipart/form-data it claims to be."""


@dataclass
class MultipartResult:
    fields: dict[str, str] = field(default_factory=dict)
    file_field: str | None = None  # the name of the part that went to the sink
    filename: str | None = None


def boundary_of(content_type: str | None) -> str:
    if not content_type:
        raise MultipartError("Content-Type is missing; send multipart/form-data")
    kind, _, rest = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise MultipartError(f"Content-Type is {kind.strip()!r}; send multipart/form-data")
    params = _params(";" + rest)
    boundary = params.get("boundary")
    if not boundary or len(boundary) > 200:
        raise MultipartError("multipart/form-data without a usable boundary")
    return boundary


def _params(text: str) -> dict[str, str]:
    params = {}
    for name, raw in _PARAM.findall(text):
        value = raw.strip()
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params[name.lower()] = value
    return params


def _part_headers(block: bytes) -> tuple[str, str | None]:
    """(form field name, filename or None) of a part's header block."""
    name = None
    filename = None
    for line in block.decode("utf-8", errors="replace").split("\r\n"):
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-disposition":
            params = _params(";" + value.partition(";")[2])
            name = params.get("name")
            filename = params.get("filename")
            if filename is None and "filename*" in params:
                filename = params["filename*"].split("''", 1)[-1]
    if not name:
        raise MultipartError("a part has no Content-Disposition name")
    return name, filename


async def read_multipart(
    chunks: AsyncIterator[bytes],
    boundary: str,
    *,
    file_sink: Callable[[bytes], None],
) -> MultipartResult:
    """Parse the body; bytes of the (single) part that has a filename go to `file_sink`."""
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    result = MultipartResult()
    # A leading CRLF makes the first boundary look like every later one.
    buffer = bytearray(b"\r\n")
    state = "preamble"
    current: str | None = None
    field_bytes = bytearray()
    num_parts = 0
    ended = False

    def emit(data: bytes) -> None:
        if current is None:
            return
        if current == "\x00file":
            file_sink(data)
            return
        if len(field_bytes) + len(data) > _MAX_FIELD_BYTES:
            raise MultipartError(f"form field is longer than {_MAX_FIELD_BYTES} bytes")
        field_bytes.extend(data)

    async for chunk in chunks:
        if ended:
            continue  # the epilogue is ignored
        buffer.extend(chunk)
        while True:
            if state == "preamble" or state == "body":
                index = buffer.find(delimiter)
                if index < 0:
                    keep = len(delimiter) - 1
                    if len(buffer) > keep:
                        if state == "body":
                            emit(bytes(buffer[:-keep]))
                        del buffer[:-keep]
                    break
                if state == "body":
                    emit(bytes(buffer[:index]))
                    _close_part(result, current, field_bytes)
                    field_bytes.clear()
                    current = None
                del buffer[: index + len(delimiter)]
                state = "after_delimiter"
            if state == "after_delimiter":
                if len(buffer) < 2:
                    break
                if buffer[:2] == b"--":
                    ended = True
                    break
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 256:
                        raise MultipartError("malformed boundary line")
                    break
                del buffer[: end + 2]  # transport padding, then CRLF
                state = "headers"
            if state == "headers":
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > _MAX_HEADER_BYTES:
                        raise MultipartError("part headers are too long")
                    break
                name, filename = _part_headers(bytes(buffer[:end]))
                del buffer[: end + 4]
                num_parts += 1
                if num_parts > _MAX_PARTS:
                    raise MultipartError(f"more than {_MAX_PARTS} parts")
                if filename is not None:
                    if result.file_field is not None:
                        raise MultipartError("more than one file part; send one file")
                    result.file_field, result.filename = name, filename
                    current = "\x00file"
                else:
                    current = name
                state = "body"
    if not ended:
        raise MultipartError("the body ended before the closing boundary")
    return result


def _close_part(result: MultipartResult, current: str | None, data: bytearray) -> None:
    if current is None or current == "\x00file":
        return
    try:
        result.fields[current] = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise MultipartError(f"form field {current!r} is not UTF-8") from None
