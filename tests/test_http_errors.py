"""Error responses a user meets: the site's own pages (403, 404, 413, 500, 400, CSRF),
JSON 413 on the API, and truthful Retry-After on every 429 with its real status line."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import httpx
import pytest
from bs4 import BeautifulSoup
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import path
from django.utils import timezone

from answers.models import Answer, Conversation, Question
from config.urls import handler400, handler403, handler404, handler500  # noqa: F401
from config.urls import urlpatterns as site_urlpatterns
from tests.helpers import api_post, assert_json_error, bearer_headers

pytestmark = pytest.mark.django_db

TEN_MB = 10 * 1024 * 1024


def _boom(request):  # type: ignore[no-untyped-def]
    raise RuntimeError("a bug")


def _forbidden(request):  # type: ignore[no-untyped-def]
    raise PermissionDenied


# This module is also a URLconf: the site's, plus a view that fails (for the 500 page).
urlpatterns = [path("boom/", _boom), path("forbidden/", _forbidden), *site_urlpatterns]


@pytest.fixture(autouse=True)
def _production(settings):  # type: ignore[no-untyped-def]
    settings.DEBUG = False


def _site_page(response) -> BeautifulSoup:  # type: ignore[no-untyped-def]
    """The response is a page of the site: the base template's header and stylesheet."""
    assert response["Content-Type"].startswith("text/html")
    page = BeautifulSoup(response.content.decode(), "html.parser")
    assert page.select_one("header.site-header a.brand") is not None
    assert page.select_one('link[rel="stylesheet"][href$="site.css"]') is not None
    return page


def _logout_form(page: BeautifulSoup):  # type: ignore[no-untyped-def]
    form = page.select_one('form[method="post"][action="/accounts/logout/"]')
    assert form is not None, "no log-out button"
    assert form.select_one('input[name="csrfmiddlewaretoken"]')["value"]
    return form


# ------------------------------------------------------------------------------ 403


def test_a_user_without_the_ask_permission_is_told_why_and_can_log_out(client, no_ask_user):
    client.force_login(no_ask_user)
    response = client.get("/")
    assert response.status_code == 403
    page = _site_page(response)
    text = page.get_text(" ", strip=True)
    assert "You do not have permission to ask questions." in text
    assert "reader" in text  # who is logged in
    assert "Can ask questions" in text  # what to ask an administrator for
    _logout_form(page)
    # The button works: after it, the user is logged out.
    client.post("/accounts/logout/")
    assert client.get("/").status_code == 302


def test_a_bare_permission_denied_still_says_what_to_do(client, no_ask_user, settings):
    settings.ROOT_URLCONF = __name__
    client.force_login(no_ask_user)
    response = client.get("/forbidden/")
    assert response.status_code == 403
    text = _site_page(response).get_text(" ", strip=True)
    assert "You do not have permission to do this." in text


# ------------------------------------------------------------------------------ 404


def test_a_missing_page_is_the_site_404(client, asker):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    page = _site_page(response)
    assert "There is nothing here" in page.get_text()
    assert page.select_one('a[href="/accounts/login/"]') is not None  # logged out: log in
    client.force_login(asker)
    _logout_form(_site_page(client.get("/answers/999999999/")))


def test_a_missing_api_path_is_json(client):
    response = client.get("/api/no-such-endpoint")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


# ------------------------------------------------------------------------------ 500, CSRF


@pytest.mark.parametrize(
    ("client_options", "method", "path", "status", "says"),
    [
        pytest.param(
            {"raise_request_exception": False}, "get", "/boom/", 500,
            "Something went wrong on our side", id="server-error",
        ),
        pytest.param(
            {"enforce_csrf_checks": True}, "post", "/accounts/logout/", 403,
            "reload the page", id="csrf-failure",
        ),
    ],
)  # fmt: skip
def test_a_logged_in_error_page_says_what_to_do_with_the_log_out_button(
    asker, settings, client_options, method, path, status, says
):
    settings.ROOT_URLCONF = __name__  # the site's URLs, and a view that fails
    client = Client(**client_options)
    client.force_login(asker)
    response = getattr(client, method)(path)
    assert response.status_code == status
    page = _site_page(response)
    assert says in page.get_text()
    assert "a bug" not in page.get_text()  # no internals
    _logout_form(page)  # a fresh token: this button works


# ------------------------------------------------------------------------------ 400


def test_a_bad_request_is_the_site_400(client):
    response = client.get("/accounts/login/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert "could not be read" in _site_page(response).get_text()


# ------------------------------------------------------------------------------ 413


def test_a_too_large_form_is_the_site_413(client):
    response = client.post(
        "/accounts/login/",
        data="username=a&password=" + "x" * TEN_MB,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 413
    assert "too large" in _site_page(response).get_text()


def test_a_too_large_api_body_is_json_413(client, asker):
    response = api_post(client, "/api/answers", {"question": "x" * TEN_MB}, user=asker)
    # ErrorOut's shape, as the API's other errors.
    assert assert_json_error(response, 413) == {
        "detail": "The request body is too large.",
        "code": "too_large",
    }


def test_too_large_bodies_over_real_http(daphne_live_server, asker):
    body = json.dumps({"question": "x" * TEN_MB})
    headers = {**bearer_headers(asker), "Content-Type": "application/json"}
    response = httpx.post(
        f"{daphne_live_server.url}/api/answers", content=body, headers=headers, timeout=30
    )
    assert (response.status_code, response.reason_phrase) == (413, "Request Entity Too Large")
    assert_json_error(response, 413, "too_large")
    assert "Traceback" not in response.text

    # As a browser sends it: with the CSRF cookie, so the body is what gets read.
    with httpx.Client(timeout=30) as browser:
        login = f"{daphne_live_server.url}/accounts/login/"
        browser.get(login)
        response = browser.post(
            login,
            content=b"username=a&password=" + b"x" * TEN_MB,
            headers={"Content-Type": "application/x-www-form-urlencoded", "Referer": login},
        )
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("text/html")
    assert "too large" in BeautifulSoup(response.text, "html.parser").get_text()


# ------------------------------------------------------------------------------ 429


def _fill_question_window(user, *, count: int, oldest_age: timedelta) -> None:  # type: ignore[no-untyped-def]
    conversation = Conversation.objects.create(owner=user)
    for turn in range(1, count + 1):
        Question.objects.create(conversation=conversation, turn=turn, text="q", user=user)
    # The oldest question of the window is `oldest_age` old; the rest are new.
    first = Question.objects.get(conversation=conversation, turn=1)
    Question.objects.filter(pk=first.pk).update(created_at=timezone.now() - oldest_age)


def _retry_after(response) -> int:  # type: ignore[no-untyped-def]
    value = response.headers["Retry-After"]
    assert re.fullmatch(r"\d+", value), value
    return int(value)


def test_the_question_limit_says_when_to_retry_over_real_http(daphne_live_server, asker):
    # The live server runs the default limit of 20 a minute; the oldest of the 20 is 45 s
    # old, so a slot frees in 15 s.
    _fill_question_window(asker, count=20, oldest_age=timedelta(seconds=45))
    response = httpx.post(
        f"{daphne_live_server.url}/api/answers",
        json={"question": "What is a lambda expression?"},
        headers=bearer_headers(asker),
        timeout=30,
    )
    assert (response.status_code, response.reason_phrase) == (429, "Too Many Requests")
    assert_json_error(response, 429, "rate_limited")
    assert 10 <= _retry_after(response) <= 15


def test_the_stream_limit_says_when_a_slot_is_surely_free(client, asker, settings):
    settings.ANSWERS = {**settings.ANSWERS, "MAX_CONCURRENT_STREAMS": 1, "TOTAL_TIMEOUT": 180}
    conversation = Conversation.objects.create(owner=asker)
    question = Question.objects.create(conversation=conversation, turn=1, text="q", user=asker)
    answer = Answer.objects.create(question=question, status=Answer.Status.STREAMING)
    Answer.objects.filter(pk=answer.pk).update(created_at=timezone.now() - timedelta(seconds=100))
    response = api_post(
        client, "/api/answers", {"question": "What is a lambda expression?"}, user=asker
    )
    assert_json_error(response, 429, "rate_limited")
    # The running answer is 100 s into its 180 s cap.
    assert 75 <= _retry_after(response) <= 80


def _login_attempt(base: str, client: httpx.Client, password: str) -> httpx.Response:
    page = client.get(f"{base}/accounts/login/")
    token = BeautifulSoup(page.text, "html.parser").select_one('input[name="csrfmiddlewaretoken"]')[
        "value"
    ]
    return client.post(
        f"{base}/accounts/login/",
        data={"username": "asker", "password": password, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/accounts/login/"},
    )


def test_a_login_lockout_says_when_to_retry_over_real_http(daphne_live_server, asker):
    base = daphne_live_server.url
    with httpx.Client(timeout=30) as client:
        for _ in range(4):  # the fifth failure (DJANGO_LOGIN_FAILURE_LIMIT) locks out
            assert _login_attempt(base, client, "wrong").status_code == 200
        locking = _login_attempt(base, client, "wrong")
        locked = _login_attempt(base, client, "pw-asker")
    for response in (locking, locked):
        assert (response.status_code, response.reason_phrase) == (429, "Too Many Requests")
        # DJANGO_LOGIN_COOLOFF_MINUTES (15) from the last failed attempt, just now.
        assert 14 * 60 <= _retry_after(response) <= 15 * 60
