"""The WebSocket's Origin check: the full origin, as Django's CSRF check does for HTTP.

Browsers send cookies with a socket opened by any page, so the Origin header is what tells
the site's own pages from another site's, or from another port or scheme of the same host
(``http://localhost:1`` is a different origin from ``http://localhost:8000``). Channels'
``AllowedHostsOriginValidator`` compares only the host name; this one accepts exactly what
``CsrfViewMiddleware`` accepts for an unsafe HTTP request:

- the site's own origin, ``<scheme>://<Host header>``, where the scheme is ``https`` when the
  socket is ``wss`` or ``SECURE_PROXY_SSL_HEADER`` says the proxy received it over TLS, and
  the Host is one of ``ALLOWED_HOSTS`` (always required: a rebinding DNS name is refused);
- or an origin in ``CSRF_TRUSTED_ORIGINS`` (exactly, or ``https://*.example.com`` patterns).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain


def _headers(scope: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(name.decode("latin1").lower(), []).append(value.decode("latin1"))
    return found


def _one(headers: dict[str, list[str]], name: str) -> str | None:
    # Two Origin (or Host) headers are no origin at all: refuse rather than pick one.
    values = headers.get(name, [])
    return values[0] if len(values) == 1 else None


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host(): with DEBUG on and no ALLOWED_HOSTS, the local names.
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _is_secure(scope: dict[str, Any], headers: dict[str, list[str]]) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy_header:
        return False
    meta_name, secure_value = proxy_header
    name = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
    value = _one(headers, name)
    return value is not None and value.split(",", 1)[0].strip() == secure_value


def websocket_origin_allowed(scope: dict[str, Any]) -> bool:
    headers = _headers(scope)
    origin, host = _one(headers, "origin"), _one(headers, "host")
    if not origin or not host:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False  # Django would answer 400 to this Host over HTTP
    if origin == f"{'https' if _is_secure(scope, headers) else 'http'}://{host}":
        return True
    trusted = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    if origin in trusted:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        parsed.scheme == pattern.scheme
        and is_same_domain(parsed.netloc, pattern.netloc.lstrip("*"))
        for pattern in (urlsplit(t) for t in trusted if "*" in t)
    )


class _OriginDenier(WebsocketDenier):
    # Refusing needs no channel: an alias not in CHANNEL_LAYERS means none (no Redis receive).
    channel_layer_alias = "answers-origin-denier-needs-no-layer"


class SiteOriginValidator:
    """ASGI middleware for the ``websocket`` route: refuses a foreign origin before the
    session is read, so another site's page cannot ride the user's cookie."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and websocket_origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await _OriginDenier()(scope, receive, send)
