"""CoreChannel: the API process's end of the socket to the engine core, read and written by the
event loop itself.

Why on the loop and not on helper threads: a thread that wakes from a read must win the GIL back
from the event loop (up to the 5 ms switch interval when the loop is busy), then wake the loop
again through its self-pipe; at low load that doubled the HTTP stack's share of TTFT. Here the
loop's selector reads the socket (`add_reader`), decodes whole frames and hands each message to
the client on the loop thread; writes go straight to the socket and only what the kernel does not
take at once waits in a buffer flushed by `add_writer` — the loop never blocks on a full socket.

Frames are multiprocessing.Connection's (a 4-byte big-endian signed length, or -1 and an 8-byte
length for frames over 2 GiB), so the core reads and writes with a plain Connection. Before a loop
is attached (start-up) and after it is gone (shutdown) the channel works blocking. It owns the
socket, the framing and the buffers; it knows nothing of what the messages mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import struct
from collections.abc import Callable

__all__ = ["CoreChannel"]

_READ_CHUNK = 1 << 20
_SMALL = struct.Struct("!i")
_LARGE = struct.Struct("!Q")


def frame(data: bytes) -> bytes:
    n = len(data)
    if n > 0x7FFFFFFF:
        return _SMALL.pack(-1) + _LARGE.pack(n) + data
    return _SMALL.pack(n) + data


class CoreChannel:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._inbuf = bytearray()
        self._outbuf = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_frame: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[], None] | None = None
        self._eof = False
        self._closed = False

    # -- blocking use (start-up, shutdown) --------------------------------------------------

    def read_frame_blocking(self, timeout_seconds: float | None) -> bytes | None:
        """The next whole frame, waiting up to `timeout_seconds` (None: forever); None on
        time-out. Raises EOFError when the core closed its end."""
        while True:
            data = self._pop_frame()
            if data is not None:
                return data
            ready, _, _ = select.select([self._sock], [], [], timeout_seconds)
            if not ready:
                return None
            if not self._fill():
                raise EOFError("the engine core closed the channel")

    # -- on the event loop -------------------------------------------------------------------

    def attach(self, on_frame: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        """Read from the running loop from now on (re-attaches if the loop changed, e.g. a new
        asyncio.run); frames already received are delivered on the next read."""
        loop = asyncio.get_running_loop()
        if self._loop is loop or self._closed:
            return
        self._detach()
        self._loop, self._on_frame, self._on_eof = loop, on_frame, on_eof
        loop.add_reader(self._sock, self._readable)
        if self._outbuf:
            loop.add_writer(self._sock, self._writable)
        if self._inbuf:
            loop.call_soon(self._deliver)

    def send(self, data: bytes) -> None:
        """Queue one message; written at once if the socket takes it."""
        if self._closed:
            raise OSError("the engine core channel is closed")
        waiting = bool(self._outbuf)
        self._outbuf += frame(data)
        loop = self._loop
        if loop is None or not self._attached_here():
            self.flush_blocking()
        elif not waiting:  # else the writer callback is registered already
            self._flush()
            if self._outbuf:
                loop.add_writer(self._sock, self._writable)

    def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(OSError):
            self.flush_blocking()
        self._detach()
        self._closed = True
        self._sock.close()

    # -- internals -------------------------------------------------------------------------------

    def _attached_here(self) -> bool:
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            return asyncio.get_running_loop() is loop
        except RuntimeError:
            return False

    def _detach(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._sock)
            loop.remove_writer(self._sock)

    def _readable(self) -> None:
        try:
            alive = self._fill()
        except OSError:
            alive = False
        self._deliver()
        if not alive and not self._eof:
            self._eof = True
            self._detach()
            if self._on_eof is not None:
                self._on_eof()

    def _deliver(self) -> None:
        on_frame = self._on_frame
        while on_frame is not None and (data := self._pop_frame()) is not None:
            on_frame(data)

    def _fill(self) -> bool:
        """Read what the socket holds; False at end-of-file."""
        while True:
            try:
                chunk = self._sock.recv(_READ_CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self._inbuf += chunk
            if len(chunk) < _READ_CHUNK:
                return True

    def _pop_frame(self) -> bytes | None:
        buf = self._inbuf
        if len(buf) < 4:
            return None
        (n,) = _SMALL.unpack_from(buf)
        start = 4
        if n == -1:
            if len(buf) < 12:
                return None
            (n,) = _LARGE.unpack_from(buf, 4)
            start = 12
        end = start + n
        if len(buf) < end:
            return None
        data = bytes(buf[start:end])
        del buf[:end]
        return data

    def _flush(self) -> None:
        while self._outbuf:
            try:
                sent = self._sock.send(self._outbuf)
            except BlockingIOError:
                return
            del self._outbuf[:sent]

    def _writable(self) -> None:
        try:
            self._flush()
        except OSError:
            self._outbuf.clear()  # the core is gone; the reader reports it
        if not self._outbuf and self._loop is not None:
            self._loop.remove_writer(self._sock)

    def flush_blocking(self) -> None:
        """Write everything waiting, blocking this thread until the socket takes it."""
        while self._outbuf:
            select.select([], [self._sock], [], None)
            self._flush()
