"""What the wire saw: per-request TTFT from a packet capture of the server's port, to split a
client tool's TTFT into the server's part and the tool's own.

bench_clients.py compares each tool's TTFT median with batchgate's. When they disagree, the
question is whose number is wrong: the server may treat the tool's requests differently (other
bodies, other connections), or the tool may spend time of its own between its clock and the
socket (an event loop busy elsewhere, a request written in two pieces, a parse before the
stamp). The capture answers it without trusting either client: for every request it has the
time its last byte reached the loopback interface (the server has all of it from then on) and
the time the first server segment carrying generated text did, so wire TTFT = first content
segment - last request byte, the same stopwatch for every client; a tool's TTFT minus its wire
TTFT is its own lag (its clock to the socket, a request written in pieces, its reading).

Owns running tcpdump on the loopback interface for one port (needs CAP_NET_RAW: root here),
reading the classic pcap format it writes (no third-party parser), and cutting the TCP
payloads into requests: HTTP/1.1 on keep-alive connections, one request at a time per
connection (what every client here does), the client named by its User-Agent header. It does
not know the tools or compare them (bench_clients.py does).
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Capture",
    "CaptureError",
    "Segment",
    "WireRequest",
    "read_pcap",
    "ttft_by_client",
    "wire_requests",
]

# A chunk with generated text: a chat delta's or a completion's non-empty string. Role chunks
# ("content":"") and usage-only chunks do not count, as they do not for a TTFT.
_CONTENT = re.compile(rb'"(?:content|text)":"[^"]')
_CARRY = 32  # bytes of a connection's last segment kept so a match split across two is found
_METHODS = (b"POST ", b"GET ", b"PUT ", b"DELETE ", b"PATCH ", b"HEAD ", b"OPTIONS ")
_UA = re.compile(rb"\r\nuser-agent:[ \t]*([^\r\n]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Segment:
    t: float  # capture time, Unix seconds (the kernel's stamp, the same clock as time.time())
    src_port: int
    dst_port: int
    payload: bytes


@dataclass
class WireRequest:
    client_port: int
    user_agent: str
    path: str
    sent: float  # the request's first byte on the wire
    complete: float  # its last byte (later than `sent` when a client writes it in pieces)
    first_response: float | None = None
    first_content: float | None = None

    @property
    def ttft(self) -> float | None:
        """From the request's last byte: before it the server cannot start, and the time a
        client takes between writing its headers and its body is the client's."""
        return None if self.first_content is None else self.first_content - self.complete


def read_pcap(path: Path) -> Iterator[Segment]:
    """TCP segments with a payload from a classic pcap file (tcpdump -w), IPv4 and IPv6, link
    types Ethernet (what Linux gives `lo`), cooked v1/v2, BSD loopback and raw IP."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file (pcapng is not read; use tcpdump -w)")
    scale = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    link = struct.unpack(endian + "I", data[20:24])[0] & 0xFFFF
    skip = {1: 14, 113: 16, 276: 20, 0: 4, 101: 0, 12: 0}.get(link)
    if skip is None:
        raise ValueError(f"{path}: link type {link} is not read")
    header = struct.Struct(endian + "IIII")
    offset = 24
    while offset + 16 <= len(data):
        seconds, fraction, captured, _ = header.unpack_from(data, offset)
        offset += 16
        frame = data[offset : offset + captured]
        offset += captured
        segment = _tcp_segment(frame[skip:], seconds + fraction * scale)
        if segment is not None:
            yield segment


def _tcp_segment(ip: bytes, t: float) -> Segment | None:
    if len(ip) < 20:
        return None
    version = ip[0] >> 4
    if version == 4:
        if ip[9] != 6:
            return None
        start, end = (ip[0] & 0x0F) * 4, struct.unpack("!H", ip[2:4])[0]
    elif version == 6 and len(ip) >= 40:
        if ip[6] != 6:  # extension headers are not followed (loopback TCP has none)
            return None
        start, end = 40, 40 + struct.unpack("!H", ip[4:6])[0]
    else:
        return None
    tcp = ip[start:end]
    if len(tcp) < 20:
        return None
    payload = tcp[(tcp[12] >> 4) * 4 :]
    if not payload:
        return None
    src, dst = struct.unpack("!HH", tcp[:4])
    return Segment(t, src, dst, payload)


def wire_requests(segments: Iterator[Segment], server_port: int) -> list[WireRequest]:
    """The requests sent to `server_port`, in order, each with its wire times.

    A client segment that starts with an HTTP method opens a request on its connection; later
    client segments until the server answers are the rest of it. Server segments belong to the
    connection's open request; the first one whose text (with the tail of the one before)
    shows generated text is its first content."""
    found: list[WireRequest] = []
    open_requests: dict[int, WireRequest] = {}
    carry: dict[int, bytes] = {}
    for seg in segments:
        if seg.dst_port == server_port:
            current = open_requests.get(seg.src_port)
            if seg.payload.startswith(_METHODS) and (
                current is None or current.first_response is not None
            ):
                head = seg.payload.split(b"\r\n\r\n", 1)[0]
                agent = _UA.search(head)
                current = WireRequest(
                    client_port=seg.src_port,
                    user_agent=agent.group(1).decode("latin-1") if agent else "",
                    path=head.split(b" ", 2)[1].decode("latin-1") if b" " in head else "",
                    sent=seg.t,
                    complete=seg.t,
                )
                open_requests[seg.src_port] = current
                carry[seg.src_port] = b""
                found.append(current)
            elif current is not None and current.first_response is None:
                current.complete = seg.t
        elif seg.src_port == server_port and seg.dst_port in open_requests:
            current = open_requests[seg.dst_port]
            if current.first_response is None:
                current.first_response = seg.t
            if current.first_content is None:
                text = carry[seg.dst_port] + seg.payload
                if _CONTENT.search(text):
                    current.first_content = seg.t
                carry[seg.dst_port] = text[-_CARRY:]
    return found


def ttft_by_client(
    requests: list[WireRequest], window: tuple[float, float], ours: str
) -> dict[str, dict]:
    """Wire TTFT p50 (ms) of the generation requests sent in `window` (Unix seconds), split into
    "batchgate" (User-Agent starting with `ours`) and "tool" (every other client), with the p50
    of how long their requests took to write (first byte to last)."""
    ttfts: dict[str, list[float]] = {"batchgate": [], "tool": []}
    writes: dict[str, list[float]] = {"batchgate": [], "tool": []}
    agents: set[str] = set()
    for r in requests:
        if not r.path.endswith("completions") or r.ttft is None:
            continue
        if not window[0] <= r.sent <= window[1]:
            continue
        mine = r.user_agent.startswith(ours)
        if not mine:
            agents.add(r.user_agent)
        key = "batchgate" if mine else "tool"
        ttfts[key].append(1000.0 * r.ttft)
        writes[key].append(1000.0 * (r.complete - r.sent))
    out: dict[str, dict] = {
        key: {
            "requests": len(v),
            "ttft_p50_ms": statistics.median(v) if v else None,
            "write_p50_ms": statistics.median(writes[key]) if v else None,
        }
        for key, v in ttfts.items()
    }
    out["tool"]["user_agents"] = sorted(agents)
    return out


class CaptureError(RuntimeError):
    """tcpdump could not start (its own message: not root, no `lo`, a bad filter)."""


class Capture:
    """tcpdump on `lo` for one TCP port, writing a pcap file, from `start()` to `stop()`."""

    def __init__(self, port: int, path: Path) -> None:
        self.port = port
        self.path = Path(path)
        self._proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> str | None:
        """None if a capture can run here, else why not."""
        if shutil.which("tcpdump") is None:
            return "tcpdump is not installed (Debian: apt-get install tcpdump)"
        return None

    def start(self, timeout: float = 10.0) -> None:
        self._proc = subprocess.Popen(
            # --immediate-mode and -U: each packet reaches the file as it comes (without them a
            # part-filled capture block is lost at stop: a short capture came back empty);
            # -s 0: whole packets (an SSE segment holding a role chunk and the first content
            # chunk is longer than a short snap length keeps).
            ["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-s", "0", "-n", "-w",
             str(self.path), f"tcp port {self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self._proc.stderr is not None
        deadline = time.monotonic() + timeout
        said = b""
        while b"listening on" not in said:  # tcpdump says so once its filter is in place
            line = self._proc.stderr.readline()
            said += line
            if not line or time.monotonic() > deadline:
                self._proc.kill()
                self._proc.wait()
                self._proc.stderr.close()
                self._proc = None
                why = said.decode(errors="replace").strip() or "no output"
                raise CaptureError(f"tcpdump did not start: {why}")

    def stop(self) -> None:
        if self._proc is None:
            return
        time.sleep(0.2)  # the last segments of a run that just ended
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stderr is not None:
            self._proc.stderr.close()
        self._proc = None
