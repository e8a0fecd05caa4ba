"""Target probes: is the server there, which model does it serve, may it be asked for per-chunk
usage?

Owns the start-of-run check (`GET /v1/models`) that turns an unreachable target into a clear
error (exit code 5) before any load starts, and the look at `GET /metrics` that resolves the
profile parameter `continuous_usage: auto`: only servers known to honour vLLM's
`stream_options.continuous_usage_stats` (the bundled server, vLLM, SGLang; recognised by their
metric names) are sent it, because a strict OpenAI server refuses an unknown stream option.
Neither probe sends a generation request, so the target sees exactly the planned requests. It
does not retry for long and does not know about profiles.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from loadgen.errors import TargetUnreachableError
from loadgen.httpconn import HttpConnection, ProtocolError, Target, parse_target

__all__ = [
    "CONTINUOUS_USAGE_PREFIXES",
    "probe_context_tokens",
    "probe_continuous_usage",
    "probe_is_bundled",
    "probe_target",
    "probe_token_units",
]

# Metric name prefixes of the servers that put cumulative usage on every chunk when asked:
# the bundled server, vLLM, SGLang.
CONTINUOUS_USAGE_PREFIXES = ("batchgate_", "vllm:", "sglang:")


def _get(
    target: Target, url: str, path: str, *, api_key: str | None, timeout_seconds: float
) -> tuple[int, bytes]:
    headers = {"Host": target.host_header, "Accept": "application/json, text/plain"}
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
    return status, body


def _target(url: str) -> Target:
    try:
        return parse_target(url)
    except ValueError as exc:
        raise TargetUnreachableError(str(exc)) from exc


def probe_target(url: str, *, api_key: str | None, timeout_seconds: float) -> str | None:
    """The first model id the target lists, or None when it does not list any."""
    target = _target(url)
    base = target.base_path
    path = f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"
    status, body = _get(target, url, path, api_key=api_key, timeout_seconds=timeout_seconds)
    if status != 200:
        return None  # reachable; it just does not list models
    try:
        data = json.loads(body)["data"]
        return str(data[0]["id"]) if data else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def probe_context_tokens(url: str, *, api_key: str | None, timeout_seconds: float) -> int | None:
    """The target's context length in tokens, where it states one: `max_model_len` in
    `/v1/models` (vLLM, the bundled server), else llama.cpp's `/props` (`n_ctx` of a slot);
    None when neither says (the trace profile then clamps nothing by default)."""
    target = _target(url)
    base = target.base_path.removesuffix("/v1")
    for path, read in ((f"{base}/v1/models", _models_context), (f"{base}/props", _props_context)):
        try:
            status, body = _get(target, url, path, api_key=api_key, timeout_seconds=timeout_seconds)
            found = read(json.loads(body)) if status == 200 else None
        except (TargetUnreachableError, ValueError, TypeError, AttributeError):
            found = None
        if isinstance(found, int) and not isinstance(found, bool) and found > 0:
            return found
    return None


def _models_context(obj: dict) -> object:
    data = obj.get("data") or []
    return data[0].get("max_model_len") if data and isinstance(data[0], dict) else None


def _props_context(obj: dict) -> object:
    settings = obj.get("default_generation_settings")
    n_ctx = obj.get("n_ctx")
    if n_ctx is None and isinstance(settings, dict):
        n_ctx = settings.get("n_ctx")
    return n_ctx


def _token_count(
    target: Target, url: str, path: str, text: str, *, model: str, api_key: str | None
) -> int | None:
    """Tokens of `text` by the target's own `/tokenize`, without special tokens: llama.cpp
    (`content`, answers `tokens`) and vLLM (`prompt`, answers `count` and `tokens`)."""
    body = json.dumps(
        {"content": text, "prompt": text, "model": model, "add_special": False,
         "add_special_tokens": False}
    ).encode()  # fmt: skip
    headers = {"Host": target.host_header, "Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    deadline = time.monotonic() + 10.0
    try:
        conn = HttpConnection(target, connect_timeout_seconds=10.0)
    except OSError:
        return None
    try:
        conn.send_request("POST", path, headers, body)
        status, resp_headers, _ = conn.read_head(deadline)
        data = b"".join(piece for piece, _ in conn.iter_body(resp_headers, deadline))
        obj = json.loads(data) if status == 200 else None
    except (OSError, ProtocolError, ValueError):
        return None
    finally:
        conn.close()
    if not isinstance(obj, dict):
        return None
    count = obj.get("count")
    tokens = obj.get("tokens")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    return len(tokens) if isinstance(tokens, list) else None


def probe_token_units(
    url: str, candidates: Sequence[str], *, model: str, api_key: str | None
) -> list[str] | None:
    """The candidates the target's `/tokenize` counts as one token each and that keep their
    count when concatenated (checked on a 256-unit sample); None when the target has no
    `/tokenize` or too few units pass. One request per candidate, before any load."""
    target = _target(url)
    path = f"{target.base_path.removesuffix('/v1')}/tokenize"
    single = []
    for unit in candidates:
        count = _token_count(target, url, path, unit, model=model, api_key=api_key)
        if count is None and not single:
            return None  # no /tokenize (or not this shape): nothing to verify with
        if count == 1:
            single.append(unit)
    if len(single) < 16:
        return None
    sample = "".join(single[(i * 7) % len(single)] for i in range(256))
    if _token_count(target, url, path, sample, model=model, api_key=api_key) != 256:
        return None
    return single


def probe_is_bundled(url: str, *, api_key: str | None, timeout_seconds: float) -> bool:
    """Whether the target is batchgate's bundled server (its `/metrics` names say so), whose
    byte-level tokenizer makes one ASCII byte exactly one token."""
    return _metrics_start_with(
        url, ("batchgate_",), api_key=api_key, timeout_seconds=timeout_seconds
    )


def probe_continuous_usage(url: str, *, api_key: str | None, timeout_seconds: float) -> bool:
    """Whether the target's `/metrics` names it as a server that honours continuous usage
    stats; False when it has no `/metrics`, or does not answer (sending the option is the
    risk, not leaving it out)."""
    return _metrics_start_with(
        url, CONTINUOUS_USAGE_PREFIXES, api_key=api_key, timeout_seconds=timeout_seconds
    )


def _metrics_start_with(
    url: str, prefixes: tuple[str, ...], *, api_key: str | None, timeout_seconds: float
) -> bool:
    try:
        target = _target(url)
        base = target.base_path.removesuffix("/v1")  # /metrics sits beside /v1, not under it
        status, body = _get(
            target, url, f"{base}/metrics", api_key=api_key, timeout_seconds=timeout_seconds
        )
    except TargetUnreachableError:
        return False
    if status != 200:
        return False
    return any(line.startswith(prefixes) for line in body.decode("utf-8", "replace").splitlines())
