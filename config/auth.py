"""Login throttling (django-axes): how the site names a client, and what a locked-out login
sees. Referenced from config/settings.py (AXES_CLIENT_IP_CALLABLE, AXES_LOCKOUT_CALLABLE)."""

from __future__ import annotations

import math
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


def login_client_ip(request: HttpRequest) -> str | None:
    """The address daphne saw, not a header read here (django-ipware, if installed, would
    believe any X-Forwarded-For). Behind a proxy, daphne's ``--proxy-headers`` puts the
    proxy's X-Forwarded-For here; docs/security.md says how the proxy must set it."""
    return request.META.get("REMOTE_ADDR")


def login_locked_out(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """The login page again, with the lockout said plainly (429, not a bare 403)."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    context = {
        "form": AuthenticationForm(request),
        "next": request.POST.get("next", "") if request.method == "POST" else "",
        "locked_out": True,
        "cooloff_minutes": minutes,
    }
    response = render(
        request, "registration/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )
    response["Retry-After"] = str(_lockout_seconds_left(request, credentials))
    return response


def _lockout_seconds_left(request: HttpRequest, credentials: Any) -> int:
    """Seconds until this username and address may log in again: django-axes counts the
    cool-off from the pair's last failed attempt."""
    cooloff = settings.AXES_COOLOFF_TIME
    username = (credentials or {}).get("username") if isinstance(credentials, dict) else None
    if username is None and request.method == "POST":
        username = request.POST.get("username")
    last = (
        AccessAttempt.objects.filter(username=username, ip_address=login_client_ip(request))
        .order_by("-attempt_time")
        .values_list("attempt_time", flat=True)
        .first()
    )
    if last is None:
        return max(1, math.ceil(cooloff.total_seconds()))
    return max(1, math.ceil((last + cooloff - timezone.now()).total_seconds()))
