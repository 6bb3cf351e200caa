"""Login throttling (django-axes) against the real app under daphne: repeated wrong
passwords lock the username out from that address, right password or not; the login page
says so; the admin lists the attempt; a successful login clears the count."""

from __future__ import annotations

import re

import httpx
import pytest
from django.conf import settings

from tests.sockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

LOCKED_OUT = "Too many failed logins for this account from your address"


def _log_in(server, username: str, password: str) -> httpx.Response:  # type: ignore[no-untyped-def]
    """One login through the page, as a browser does it (a fresh client: own CSRF cookie)."""
    with httpx.Client(base_url=server.url, timeout=20) as http:
        page = http.get("/accounts/login/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match is not None
        return http.post(
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": match[1]},
        )


def _logged_in(response: httpx.Response) -> bool:
    return response.status_code == 302 and "sessionid" in response.cookies


def test_repeated_wrong_passwords_lock_the_login_out(daphne_live_server, asker):
    limit = int(settings.AXES_FAILURE_LIMIT)
    for _ in range(limit - 1):
        wrong = _log_in(daphne_live_server, "asker", "not-the-password")
        assert wrong.status_code == 200 and "didn't match" in wrong.text
    # The failure that reaches the limit locks already.
    assert _log_in(daphne_live_server, "asker", "not-the-password").status_code == 429
    right = _log_in(daphne_live_server, "asker", "pw-asker")
    assert not _logged_in(right)
    assert right.status_code == 429
    # The site's own login page, with the lockout said plainly.
    assert LOCKED_OUT in right.text and 'class="error locked-out"' in right.text
    assert "site.css" in right.text and 'name="username"' in right.text


def test_the_admin_lists_the_attempts(daphne_live_server, asker, admin_user):
    for _ in range(int(settings.AXES_FAILURE_LIMIT)):
        _log_in(daphne_live_server, "asker", "not-the-password")
    cookie = session_cookie(admin_user)
    with httpx.Client(base_url=daphne_live_server.url, headers={"Cookie": cookie}) as http:
        listing = http.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200
    assert "asker" in listing.text and "127.0.0.1" in listing.text


def test_a_successful_login_clears_the_failures(daphne_live_server, asker, other_asker):
    limit = int(settings.AXES_FAILURE_LIMIT)
    for _ in range(limit - 1):
        _log_in(daphne_live_server, "asker", "not-the-password")
    assert _logged_in(_log_in(daphne_live_server, "asker", "pw-asker"))
    for _ in range(limit - 1):
        _log_in(daphne_live_server, "asker", "not-the-password")
    assert _logged_in(_log_in(daphne_live_server, "asker", "pw-asker"))
    # Another username from the same address was never affected.
    assert _logged_in(_log_in(daphne_live_server, "other", "pw-other"))
