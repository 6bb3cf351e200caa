"""API authentication: a bearer token for services, or the Django session (with CSRF); and
the WebSocket's session middleware."""

from __future__ import annotations

import logging
from typing import Any

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from . import services
from .pipeline import DATABASE_ERRORS

logger = logging.getLogger(__name__)

# Set in a socket's scope when its session could not be read: the database is away.
SOCKET_DATABASE_UNAVAILABLE = "answers.database_unavailable"


class BearerTokenAuth(HttpBearer):
    openapi_description = "An API token from `manage.py createapitoken USERNAME`."

    def __call__(self, request: HttpRequest) -> Any:
        # django-ninja's own parsing logs a header without "Bearer " in full (with DEBUG on),
        # and a bare token is still a token: nothing of the header may reach a log.
        scheme, _, token = request.headers.get(self.header, "").partition(" ")
        if scheme.lower() != self.openapi_scheme or not token:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        api_token = services.api_token_authenticate(raw=token)
        if api_token is None:
            return None
        request.user = api_token.user
        return api_token.user


class ActiveSessionAuth(SessionAuth):
    """Django's session; unsafe methods also need the CSRF token.

    The CSRF check runs only when there is a logged-in session: a request with neither a
    valid token nor a session is unauthenticated (401), not a CSRF failure (403).
    """

    def __call__(self, request: HttpRequest) -> Any:
        user = request.user
        if not (user.is_authenticated and user.is_active):
            return None
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = request.user
        if user.is_authenticated and user.is_active:
            return user
        return None


api_auth = [BearerTokenAuth(), ActiveSessionAuth()]


class SocketAuthMiddleware(AuthMiddleware):
    """Channels' session user, except that a database that cannot be reached (the session
    and its user are read from it) marks the scope instead of failing the handshake with
    a 500: the consumer then tells the client ``unavailable`` (consumers.AnswerConsumer)."""

    async def resolve_scope(self, scope: dict[str, Any]) -> None:
        try:
            await super().resolve_scope(scope)
        except DATABASE_ERRORS:
            logger.exception("Reading the session of a socket failed")
            scope["user"]._wrapped = AnonymousUser()
            scope[SOCKET_DATABASE_UNAVAILABLE] = True


def socket_auth_stack(inner: Any) -> Any:
    """Channels' ``AuthMiddlewareStack`` with ``SocketAuthMiddleware``."""
    return CookieMiddleware(SessionMiddleware(SocketAuthMiddleware(inner)))
