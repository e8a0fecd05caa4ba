"""Target probe: is the server there, and which model does it serve?

Owns the start-of-run check (`GET /v1/models`) that turns an unreachable target into a clear
error (exit code 5) before any load starts. It does not retry for long and does not know about
profiles.
"""

from __future__ import annotations

import json
import time

from loadgen.errors import TargetUnreachableError
from loadgen.httpconn import HttpConnection, ProtocolError, parse_target

__all__ = ["probe_target"]


def probe_target(url: str, *, api_key: str | None, timeout_seconds: float) -> str | None:
    """The first model id the target lists, or None when it does not list any."""
    try:
        target = parse_target(url)
    except ValueError as exc:
        raise TargetUnreachableError(str(exc)) from exc
    base = target.base_path
    path = f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"
    headers = {"Host": target.host_header, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    deadline = time.monotonic() + timeout_seconds
    try:
        conn = HttpConnection(target, connect_timeout_seconds=timeout_seconds)
    except OSError as exc:
        raise TargetUnreachableError(f"cannot connect to {url}: {exc}") from exc
    try:
        conn.send_request("GET", path, headers, b"")
        status, resp_headers, _ = conn.read_head(deadline)
        body = b"".join(piece for piece, _ in conn.iter_body(resp_headers, deadline))
    except (OSError, ProtocolError) as exc:
        raise TargetUnreachableError(f"{url} did not answer GET {path}: {exc}") from exc
    finally:
        conn.close()
    if status != 200:
        return None  # reachable; it just does not list models
    try:
        data = json.loads(body)["data"]
        return str(data[0]["id"]) if data else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None
