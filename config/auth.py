"""Login throttling (django-axes): how the site names a client, and what a locked-out login
sees. Referenced from config/settings.py (AXES_CLIENT_IP_CALLABLE, AXES_LOCKOUT_CALLABLE)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def login_client_ip(request: HttpRequest) -> str | None:
    """The address daphne saw, not a header read here (django-ipware, if installed, would
    believe any X-Forwarded-For). Behind a proxy, daphne's ``--proxy-headers`` puts the
    proxy's X-Forwarded-For here; README "Security" says how the proxy must set it."""
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
    return render(
        request, "registration/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )
