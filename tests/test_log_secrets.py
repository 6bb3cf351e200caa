"""No token, session cookie or password ever reaches a log, whatever the client sends."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.conf import settings as django_settings

from tests.helpers import api_post, bearer, bearer_token

pytestmark = pytest.mark.django_db

QUESTION = '{"question": "What is a lambda expression?"}'


@pytest.fixture
def everything_logged(caplog, settings):  # type: ignore[no-untyped-def]
    # With DEBUG on, as `make run` serves: django-ninja logged a malformed header in full.
    settings.DEBUG = True
    caplog.set_level(logging.DEBUG)
    return caplog


def _post(client, **headers: str):  # type: ignore[no-untyped-def]
    return api_post(client, "/api/answers", QUESTION, **headers)


@pytest.mark.parametrize(
    "header",
    ["{token}", "Token {token}", "bearer:{token}", "Basic {token}", "{token} Bearer"],
)
def test_a_malformed_authorization_header_is_not_logged(client, asker, everything_logged, header):
    raw = bearer_token(asker, name="t")
    response = _post(client, HTTP_AUTHORIZATION=header.format(token=raw))
    assert response.status_code == 401
    assert raw not in everything_logged.text
    assert raw[3:] not in everything_logged.text  # not even without its prefix


def test_a_wrong_token_is_not_logged(client, everything_logged):
    wrong = "ca_" + "x" * 43
    response = _post(client, **bearer(raw=wrong))
    assert response.status_code == 401
    assert "x" * 43 not in everything_logged.text


def test_a_right_token_is_not_logged(client, asker, everything_logged):
    raw = bearer_token(asker, name="t")
    response = _post(client, **bearer(raw=raw))
    assert response.status_code == 200
    assert raw[3:] not in everything_logged.text


def test_failed_logins_and_the_lockout_log_no_password(client, asker, everything_logged):
    passwords = [f"guess-{n}-s3cret" for n in range(6)]
    for password in passwords:
        client.post("/accounts/login/", {"username": "asker", "password": password})
    assert any(
        "lockout" in r.getMessage().lower() or "locking" in r.getMessage().lower()
        for r in everything_logged.records
    )
    for password in passwords:
        assert password not in everything_logged.text


def test_session_cookies_are_not_logged(client, asker, everything_logged):
    response = client.post("/accounts/login/", {"username": "asker", "password": "pw-asker"})
    assert response.status_code == 302
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    csrf = client.get("/").cookies  # a page that sets the CSRF cookie
    for path in ("/", "/answers/", "/no-such-page/", "/api/answers"):
        client.get(path)
    _post(client)  # the API by session without a CSRF token: refused
    assert session not in everything_logged.text
    for morsel in csrf.values():
        assert morsel.value not in everything_logged.text


def test_the_live_server_logs_no_token(daphne_live_server, asker):
    raw = bearer_token(asker, name="t")
    start = daphne_live_server.log_size()
    for header in (raw, f"Token {raw}", f"Bearer {raw}x"):
        response = httpx.post(
            f"{daphne_live_server.url}/api/answers",
            content=QUESTION,
            headers={"Authorization": header, "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 401
    log = daphne_live_server.log_since(start)
    assert "/api/answers" in log  # the requests were logged, without their header
    assert raw[3:] not in log
