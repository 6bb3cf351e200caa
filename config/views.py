"""The site's error pages (config/urls.py handler400..500, settings CSRF_FAILURE_VIEW).

Each is a page of the site (templates/errors/*.html extend base.html, so a logged-in user
keeps the header's "Log out") that says what happened and what to do. Under ``/api/`` the
same errors come as the API's JSON (``{"detail", "code"}``), never as HTML.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader

logger = logging.getLogger(__name__)

_API_PREFIX = "/api/"
_DETAILS = {
    400: ("The request could not be read.", "bad_request"),
    403: ("You do not have permission to do this.", "forbidden"),
    404: ("Not found.", "not_found"),
    413: ("The request is too large.", "too_large"),
    500: ("Something went wrong on the server.", "server_error"),
}


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(_API_PREFIX)


def error_response(
    request: HttpRequest, status: int, *, context: dict[str, Any] | None = None
) -> HttpResponse:
    """The error page for ``status`` (JSON under /api/)."""
    detail, code = _DETAILS[status]
    if _is_api(request):
        return JsonResponse({"detail": detail, "code": code}, status=status)
    template = loader.get_template(f"errors/{status}.html")
    return HttpResponse(template.render(context or {}, request), status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # Django turns a body over DATA_UPLOAD_MAX_MEMORY_SIZE (a SuspiciousOperation) into a
    # 400; it is a 413 and says so.
    if isinstance(exception, RequestDataTooBig):
        return error_response(request, 413)
    return error_response(request, 400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    # Our own PermissionDenied messages are written for the user (answers/views.py).
    message = str(exception) if exception is not None and str(exception) else ""
    return error_response(request, 403, context={"message": message})


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 404)


def server_error(request: HttpRequest) -> HttpResponse:
    try:
        return error_response(request, 500)
    except Exception:
        # The page needs the session (header); when that is what failed, a page without it.
        logger.exception("The 500 page could not be rendered with the request")
        template = loader.get_template("errors/500.html")
        return HttpResponse(template.render({}), status=500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A refused form (a stale or missing CSRF token): the usual cause is a page left open
    across a log-in or log-out, so going back and reloading fixes it."""
    if _is_api(request):
        return JsonResponse(
            {"detail": "CSRF check failed: send the X-CSRFToken header.", "code": "csrf_failed"},
            status=403,
        )
    template = loader.get_template("errors/403_csrf.html")
    return HttpResponse(template.render({"reason": reason}, request), status=403)
