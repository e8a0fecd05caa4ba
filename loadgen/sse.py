"""Server-sent events: an incremental parser from body bytes to `data:` payloads.

Owns the SSE line protocol (LF or CRLF line ends, `data:` lines joined with newlines, comments and
other fields ignored, an event ends at a blank line). It does not know what the payloads mean
(OpenAI chunks are interpreted in `loadgen.client`) nor how bytes arrive.
"""

from __future__ import annotations

__all__ = ["SSEParser"]


class SSEParser:
    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The data payloads of every event completed by `chunk`.

        Raises UnicodeDecodeError on bytes that are not UTF-8 (a protocol error for callers).
        """
        self._buffer += chunk
        events: list[str] = []
        while True:
            nl = self._buffer.find(b"\n")
            if nl < 0:
                break
            line = self._buffer[:nl]
            self._buffer = self._buffer[nl + 1 :]
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value.removeprefix(b" ").decode("utf-8"))
        return events

    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a truncated stream)."""
        return bool(self._buffer.strip() or self._data)
