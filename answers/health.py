"""Liveness and readiness, for load balancers and orchestrators (docs/deployment.md).

``/health/live``: the process answers (restart it if not). ``/health/ready``: it takes
questions now: not shutting down, its database answers, and the cache that holds the
stream logs answers; else 503 with what is wrong, so traffic goes elsewhere (during a
SIGTERM drain too). Neither says more than a word per problem: they are unauthenticated.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.core.cache import caches
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from .conf import answers_settings
from .pipeline import DATABASE_ERRORS
from .streams import generation

logger = logging.getLogger(__name__)

LIVE_PATH = "/health/live"
READY_PATH = "/health/ready"
# How long a load balancer should wait before probing a process that is not ready again.
NOT_READY_RETRY_AFTER = 5


def service_readiness_problems() -> list[str]:
    """Why this process should not be sent questions now; empty when it should."""
    problems = []
    if generation.draining:
        problems.append("shutting_down")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DATABASE_ERRORS:
        logger.warning("Readiness: the database does not answer", exc_info=True)
        problems.append("database")
    try:
        caches[str(answers_settings.STREAM_CACHE)].get("answers.health")
    except Exception:  # any backend's own connection error
        logger.warning("Readiness: the stream cache does not answer", exc_info=True)
        problems.append("stream_cache")
    return problems


class HealthCheckMiddleware:
    """Answers the two paths before anything else runs (first in MIDDLEWARE): a probe
    addresses the process by its own IP, which ALLOWED_HOSTS does not list, over plain
    HTTP inside the network, which the https redirect would turn away, and has no session
    or CSRF token. Every other request goes on unchanged, in the mode it came in (under
    daphne, in the event loop: a synchronous middleware here would move every request to
    a thread first)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        path = _probed(request)
        if path is None:
            return self.get_response(request)
        return _probe_response(service_readiness_problems() if path == READY_PATH else [])

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        path = _probed(request)
        if path is None:
            response: HttpResponse = await self.get_response(request)
            return response
        if path == READY_PATH:
            return _probe_response(await sync_to_async(service_readiness_problems)())
        return _probe_response([])


def _probed(request: HttpRequest) -> str | None:
    """Which probe ``request`` is, if it is one."""
    path = request.path_info.rstrip("/")
    if path in (LIVE_PATH, READY_PATH) and request.method in ("GET", "HEAD"):
        return path
    return None


def _probe_response(problems: list[str]) -> HttpResponse:
    if problems:
        response = JsonResponse({"status": "unavailable", "problems": problems}, status=503)
        response["Retry-After"] = str(NOT_READY_RETRY_AFTER)
    else:
        response = JsonResponse({"status": "ok"})
    response["Cache-Control"] = "no-store"
    return response
