"""benchmarks/wire_capture.py: pcap files read back to per-request wire times (a request written
in two pieces, keep-alive, text split across segments, role chunks, IPv6, both timestamp
precisions), the split by User-Agent over a window, and, where tcpdump can run, a real capture
of a loopback exchange."""

from __future__ import annotations

import http.server
import os
import shutil
import struct
import threading
import urllib.request
from pathlib import Path

import pytest

from benchmarks.wire_capture import Capture, read_pcap, ttft_by_client, wire_requests

SERVER = 8000
T0 = 1_800_000_000.0


def _frame(src: int, dst: int, payload: bytes, *, v6: bool) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", src, dst, 0, 0, 5 << 4, 0x18, 65535, 0, 0) + payload
    if v6:
        ip = struct.pack("!IHBB", 6 << 28, len(tcp), 6, 64) + bytes(15) + b"\x01" + bytes(15)
        ip += b"\x01"
        return bytes(12) + b"\x86\xdd" + ip + tcp
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0, 64, 6, 0,
                     b"\x7f\0\0\x01", b"\x7f\0\0\x01")  # fmt: skip
    return bytes(12) + b"\x08\x00" + ip + tcp


def _pcap(path: Path, packets: list[tuple[float, int, int, bytes, bool]], *, nano: bool) -> None:
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, 1)]
    for t, src, dst, payload, v6 in sorted(packets, key=lambda p: p[0]):  # capture order
        frame = _frame(src, dst, payload, v6=v6)
        seconds = int(t)
        fraction = round((t - seconds) * (1e9 if nano else 1e6))
        out.append(struct.pack("<IIII", seconds, fraction, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


def _post(agent: str, path: str = "/v1/chat/completions") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: {agent}\r\n\r\n".encode()


def _chunk(delta: bytes) -> bytes:
    return b'data: {"choices":[{"delta":' + delta + b"}]}\n\n"


PACKETS = [
    # A tool that writes its headers and its body apart, then waits on a split content chunk.
    (T0 + 0.000, 40001, SERVER, _post("python-httpx/0.29.0"), False),
    (T0 + 0.002, 40001, SERVER, b'{"stream":true}', False),
    (T0 + 0.010, SERVER, 40001, b"HTTP/1.1 200 OK\r\n\r\n", False),
    (T0 + 0.011, SERVER, 40001, _chunk(b'{"role":"assistant","content":""}'), False),
    (T0 + 0.015, SERVER, 40001, b'data: {"choices":[{"delta":{"content":', False),
    (T0 + 0.016, SERVER, 40001, b'"A"}}]}\n\n', False),
    (T0 + 0.030, SERVER, 40001, _chunk(b'{"content":"B"}'), False),
    # The same connection again (keep-alive): a new request.
    (T0 + 1.000, 40001, SERVER, _post("python-httpx/0.29.0") + b"{}", False),
    (T0 + 1.020, SERVER, 40001, b"HTTP/1.1 200 OK\r\n\r\n" + _chunk(b'{"content":"C"}'), False),
    # batchgate's load on IPv6, a completion; a health probe that is not a generation.
    (T0 + 0.500, 40002, SERVER, _post("batchgate-loadgen/0.1.0", "/v1/completions"), True),
    (T0 + 0.512, SERVER, 40002, b'HTTP/1.1 200 OK\r\n\r\ndata: {"choices":[{"text":"z"}]}', True),
    (T0 + 0.600, 40003, SERVER, b"GET /health HTTP/1.1\r\n\r\n", False),
    (T0 + 0.601, SERVER, 40003, b'HTTP/1.1 200 OK\r\n\r\n{"status":"ok"}', False),
]


@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
def test_requests_and_their_first_content(tmp_path: Path, nano: bool) -> None:
    path = tmp_path / "cap.pcap"
    _pcap(path, PACKETS, nano=nano)
    found = wire_requests(read_pcap(path), SERVER)
    assert [(r.client_port, r.path, r.user_agent) for r in found] == [
        (40001, "/v1/chat/completions", "python-httpx/0.29.0"),
        (40002, "/v1/completions", "batchgate-loadgen/0.1.0"),
        (40003, "/health", ""),
        (40001, "/v1/chat/completions", "python-httpx/0.29.0"),
    ]
    first, ours, health, again = found
    tol = 2e-6
    assert first.complete - first.sent == pytest.approx(0.002, abs=tol)  # written in two pieces
    assert first.first_response - first.sent == pytest.approx(0.010, abs=tol)
    # From the body (the server had nothing to start on before it) to the segment with the
    # text: not the role chunk, not the segment that only opens the string.
    assert first.ttft == pytest.approx(0.014, abs=tol)
    assert again.ttft == pytest.approx(0.020, abs=tol)
    assert ours.ttft == pytest.approx(0.012, abs=tol)
    assert health.ttft is None

    split = ttft_by_client(found, (T0, T0 + 2), "batchgate-loadgen")
    assert split["batchgate"] == {
        "requests": 1,
        "ttft_p50_ms": pytest.approx(12.0, abs=0.01),
        "write_p50_ms": 0.0,
    }
    assert split["tool"]["requests"] == 2
    assert split["tool"]["ttft_p50_ms"] == pytest.approx(17.0, abs=0.01)
    assert split["tool"]["write_p50_ms"] == pytest.approx(1.0, abs=0.01)  # 2 ms and 0
    assert split["tool"]["user_agents"] == ["python-httpx/0.29.0"]
    # The window keeps only requests sent inside it.
    assert ttft_by_client(found, (T0 + 0.9, T0 + 2), "batchgate-loadgen")["tool"]["requests"] == 1


def test_a_file_that_is_not_pcap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.pcapng"
    path.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))
    with pytest.raises(ValueError, match="not a pcap file"):
        list(read_pcap(path))


@pytest.mark.skipif(
    shutil.which("tcpdump") is None or os.geteuid() != 0, reason="needs tcpdump and root"
)
def test_a_real_capture_of_a_loopback_exchange(tmp_path: Path) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'data: {"choices":[{"text":"hi"}]}\n\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    capture = Capture(port, tmp_path / "cap.pcap")
    capture.start()
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions", data=b"{}",
            headers={"User-Agent": "probe/1"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
    finally:
        capture.stop()
        server.shutdown()
        server.server_close()
    (found,) = wire_requests(read_pcap(capture.path), port)
    assert (found.path, found.user_agent) == ("/v1/completions", "probe/1")
    assert found.ttft is not None and 0 < found.ttft < 5


def test_a_capture_that_cannot_start_says_why(tmp_path: Path, monkeypatch) -> None:
    import subprocess

    from benchmarks import wire_capture

    real = subprocess.Popen
    refusal = 'echo "tcpdump: lo: You don\'t have permission to capture" >&2; exit 1'
    monkeypatch.setattr(
        wire_capture.subprocess, "Popen", lambda cmd, **kw: real(["sh", "-c", refusal], **kw)
    )
    with pytest.raises(wire_capture.CaptureError, match="don't have permission"):
        Capture(1, tmp_path / "x.pcap").start()
