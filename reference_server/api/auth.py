"""Who may call what: the API key on /v1/*, the admin token (or loopback-only rule) on /admin/*.

Owns the checks only; each returns nothing or raises `APIError` 401/403/415. Tokens are compared
in constant time. It knows nothing about routes beyond the request's headers and client address.
Client addresses are the socket's peer: forwarding headers are believed only from the proxies
`--trusted-proxies` names (serve.py tells uvicorn so; FORWARDED_ALLOW_IPS is ignored).

Without a token, admin is for this machine's operator, and a web page in that operator's browser
must not reach it (DNS rebinding: the page's own name resolves to 127.0.0.1): the `Host` header
must name the loopback interface, and a body must be `application/json`, which a page cannot
send cross-origin without a CORS preflight this server never answers.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.requests import Request

from reference_server.api.errors import APIError

__all__ = ["check_admin", "check_api_key", "is_loopback", "is_loopback_host_header"]


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return host == "localhost"


def is_loopback_host_header(value: str | None) -> bool:
    """`Host: localhost[:port]`, `127.x.y.z[:port]`, `[::1][:port]`; nothing else."""
    if not value:
        return False
    host = value.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_json_body(request: Request) -> None:
    if request.method in ("GET", "HEAD"):
        return
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise APIError(
            415,
            "admin requests with a body must be 'Content-Type: application/json'",
            param="content-type",
            code="unsupported_media_type",
        )


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _matches(given: str | None, expected: str) -> bool:
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def check_api_key(request: Request, api_key: str | None) -> None:
    if api_key is None:
        return
    if not _matches(_bearer(request), api_key):
        raise APIError(
            401,
            "missing or invalid API key (send 'Authorization: Bearer <key>')",
            type="authentication_error",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )


def check_admin(request: Request, admin_token: str | None) -> None:
    """With a token: the token is required from everyone. Without: loopback clients only."""
    if admin_token is None:
        host = request.client.host if request.client else None
        if not is_loopback(host):
            raise APIError(
                403,
                "admin endpoints are served to loopback clients only unless the server is "
                "started with --admin-token",
                type="permission_error",
                code="admin_forbidden",
            )
        if not is_loopback_host_header(request.headers.get("host")):
            raise APIError(
                403,
                "without --admin-token, admin requests must name the loopback interface in "
                "Host (localhost, 127.0.0.1, [::1])",
                type="permission_error",
                code="admin_forbidden_host",
            )
        _check_json_body(request)
        return
    _check_json_body(request)
    given = request.headers.get("x-admin-token") or _bearer(request)
    if not _matches(given, admin_token):
        raise APIError(
            401,
            "missing or invalid admin token (send 'Authorization: Bearer <token>' or "
            "'X-Admin-Token: <token>')",
            type="authentication_error",
            code="invalid_admin_token",
            headers={"WWW-Authenticate": "Bearer"},
        )
