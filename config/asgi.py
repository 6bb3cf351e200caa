"""ASGI entry point, served by daphne: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _status_phrases() -> None:
    """ASGI sends daphne a bare status code; daphne takes the reason phrase from Twisted's
    table, which lacks 429 (and a few more), so the status line read "429 Unknown Status".
    Fill the gaps from the standard library's table."""
    from http import HTTPStatus

    try:
        from twisted.web import http as twisted_http
    except ImportError:  # another ASGI server: it writes its own status line
        return
    for status in HTTPStatus:
        twisted_http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))


_status_phrases()
try:
    django_asgi_app = get_asgi_application()
except ImproperlyConfigured as exc:
    # A bad variable: daphne prints the one line that names it, then exits 1, instead of
    # the traceback of Django's settings import with that line at its bottom.
    raise SystemExit(f"ImproperlyConfigured: {exc}") from None

from answers.checks import serving_errors  # noqa: E402

# The settings' checks, as manage.py check runs them: a bad ANSWERS value stops daphne
# here rather than failing every question (QUESTIONS_PER_MINUTE=0 refused them all).
if _refused := serving_errors():
    raise SystemExit(
        "The settings fail their checks (manage.py check); not serving:\n"
        + "\n".join(str(message) for message in _refused)
    )

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from answers.auth import socket_auth_stack  # noqa: E402
from answers.origin import SiteOriginValidator  # noqa: E402
from answers.pool import database_pool_open_on_startup  # noqa: E402
from answers.routing import websocket_not_found, websocket_urlpatterns  # noqa: E402
from answers.streams import answer_streams_drain_on_shutdown  # noqa: E402

# SIGTERM lets running answers finish (ANSWERS["SHUTDOWN_GRACE"]) before daphne stops.
answer_streams_drain_on_shutdown()
# PostgreSQL: the process's connections open now, not while its first questions wait.
database_pool_open_on_startup()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The full Origin (scheme, host, port) is checked before the session: a page of
        # another site, or of another port or scheme of this host, cannot ride the cookie.
        # The session: Channels' own, told apart from a database that cannot be reached.
        "websocket": SiteOriginValidator(
            socket_auth_stack(URLRouter([*websocket_urlpatterns, websocket_not_found]))
        ),
    }
)
