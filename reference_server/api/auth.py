"""Who may call what: the API key on /v1/*, the admin token (or loopback-only rule) on /admin/*.

Owns the checks only; each returns nothing or raises `APIError` 401/403. Tokens are compared in
constant time. It knows nothing about routes beyond the request's headers and client address.
Client addresses are as uvicorn reports them: behind a reverse proxy on this host, uvicorn takes
the client from X-Forwarded-For (it trusts that header from 127.0.0.1 only), so remote clients
coming through a local proxy are not mistaken for loopback ones.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.requests import Request

from reference_server.api.errors import APIError

__all__ = ["check_admin", "check_api_key", "is_loopback"]


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return host == "localhost"


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
        return
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
