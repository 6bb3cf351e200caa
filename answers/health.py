"""Liveness and readiness, for load balancers and orchestrators (docs/deployment.md).

``/health/live``: the process answers (restart it if not). ``/health/ready``: it takes
questions now: not shutting down, its database answers, and the cache that holds the
stream logs answers; else 503 with what is wrong, so traffic goes elsewhere (during a
SIGTERM drain too). Neither says more than a word per problem: they are unauthenticated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
    or CSRF token. Every other request goes on unchanged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info.rstrip("/")
        if path not in (LIVE_PATH, READY_PATH) or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        problems = service_readiness_problems() if path == READY_PATH else []
        if problems:
            response = JsonResponse({"status": "unavailable", "problems": problems}, status=503)
            response["Retry-After"] = str(NOT_READY_RETRY_AFTER)
        else:
            response = JsonResponse({"status": "ok"})
        response["Cache-Control"] = "no-store"
        return response
