"""Transport: what crosses the wire, who may open a socket, and what a request may cost.

Errors reveal nothing of the server; session writes need the CSRF token; the deployment
settings pass Django's own checklist; oversized input is refused before any work; a
socket only serves its own site's pages, and follows its user's access as it changes.
"""

from __future__ import annotations

import json
import re
import secrets

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from answers import pipeline, retrieval
from answers.conf import answers_settings
from answers.models import Answer, Feedback, Question
from answers.search import sqlite_fts5
from config.asgi import application
from tests.corpus import RESTRICTED
from tests.security.support import (
    bearer,
    post_json,
    receive_until_final,
    scoped_socket,
    session_socket,
)

LAMBDA = "What is a lambda expression?"
NIGHTJAR = "Nightjar zeppelin launch hangar"

# --- (13) errors reveal nothing ---------------------------------------------------------

# What the exploding provider's exception says, and what a debug page would show.
LEAKS = ["Traceback", "RuntimeError", "secret", "https://internal", "upstream 500", 'File "']


def assert_reveals_nothing(text: str) -> None:
    """For an error body: no trace, no exception type, nothing of what the provider said."""
    for leak in LEAKS:
        assert leak.lower() not in text.lower(), f"{leak!r} in {text[:500]!r}"


def assert_no_exception_detail(text: str) -> None:
    """For bodies that also carry documentation excerpts (which may well say "Traceback")."""
    for leak in ["provider secret detail", "https://internal", "upstream 500", "unexpected "]:
        assert leak not in text, f"{leak!r} in {text[:500]!r}"


@pytest.fixture
def exploding(settings):
    settings.ANSWERS = {**settings.ANSWERS, "PROVIDER": "tests.providers.ExplodingProvider"}


@pytest.mark.django_db
def test_a_provider_failure_gives_a_generic_json_502(client, asker, exploding, settings):
    assert settings.DEBUG is False
    headers = bearer(asker)
    response = post_json(client, "/api/answers", {"question": LAMBDA}, **headers)
    assert response.status_code == 502
    assert response.json()["detail"] == pipeline.GENERIC_ERROR
    assert_reveals_nothing(response.content.decode())
    # Nor does the stored answer, through the API or its page.
    answer_id = response.json()["answer_id"]
    assert Answer.objects.get(pk=answer_id).status == "failed"
    stored = client.get(f"/api/answers/{answer_id}", **headers)
    assert stored.status_code == 200
    assert_no_exception_detail(stored.content.decode())
    assert "RuntimeError" not in stored.json()["text"] + stored.json()["html"]
    client.force_login(asker)
    assert_no_exception_detail(client.get(f"/answers/{answer_id}/").content.decode())


@pytest.mark.django_db
def test_a_provider_failure_gives_a_generic_sse_error(client, asker, exploding):
    response = post_json(
        client, "/api/answers", {"question": LAMBDA}, HTTP_ACCEPT="text/event-stream",
        **bearer(asker),
    )  # fmt: skip
    assert response.status_code == 200

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    stream = async_to_sync(read)().decode()
    assert "event: error" in stream and "event: done" not in stream
    error = re.search(r"event: error\ndata: (.*)\n", stream)
    assert error is not None
    assert json.loads(error.group(1))["message"] == pipeline.GENERIC_ERROR
    assert_reveals_nothing(error.group(1))
    assert_no_exception_detail(stream)


@pytest.mark.django_db(transaction=True)
async def test_a_provider_failure_gives_a_generic_socket_error(corpus, asker, exploding):
    comm = scoped_socket(asker)
    assert (await comm.connect())[0]
    await comm.send_json_to({"type": "ask", "question": LAMBDA})
    messages = await receive_until_final(comm)
    assert messages[-1]["type"] == "error"
    assert messages[-1]["message"] == pipeline.GENERIC_ERROR
    assert_reveals_nothing(json.dumps(messages[-1]))
    assert_no_exception_detail(json.dumps(messages))
    await comm.disconnect()


DEBUG_MARKERS = [
    "Traceback",
    "URLconf",
    "urlpatterns",
    "DEBUG = True",
    "Django tried",
    "config.urls",
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "logged_in"),
    [
        ("/no-such-page/", False),
        ("/no-such-page/", True),
        ("/api/no-such-route", False),
        ("/api/no-such-route", True),
        ("/documents/999999/", True),
        ("/answers/999999/", True),
    ],
)
def test_unknown_urls_give_a_plain_404(client, asker, path, logged_in):
    if logged_in:
        client.force_login(asker)
    response = client.get(path)
    assert response.status_code == 404
    body = response.content.decode()
    for marker in DEBUG_MARKERS:
        assert marker not in body


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["page", "api"])
def test_an_unexpected_server_error_gives_a_plain_500(asker, scripted, monkeypatch, where):
    done = async_to_sync(pipeline.answer_question)(user=asker, question=LAMBDA)
    answer_id = done.answer.answer_id

    def explode(**kwargs: object) -> None:
        raise RuntimeError("secret detail at https://internal")

    from answers import selectors

    monkeypatch.setattr(selectors, "answer_payload", explode)
    client = Client(raise_request_exception=False)
    if where == "page":
        client.force_login(asker)
        response = client.get(f"/answers/{answer_id}/")
    else:
        response = client.get(f"/api/answers/{answer_id}", **bearer(asker))
    assert response.status_code == 500
    assert_reveals_nothing(response.content.decode())


# --- (16) session writes need the CSRF token --------------------------------------------


def csrf_client(user: User) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf_token(client: Client) -> str:
    client.get("/answers/")  # any page with a form sets the cookie
    return client.cookies["csrftoken"].value


@pytest.mark.django_db
def test_asking_over_the_session_without_the_csrf_token_is_refused(asker, scripted):
    client = csrf_client(asker)
    before = Question.objects.count()
    for extra in ({}, {"HTTP_ACCEPT": "text/event-stream"}):
        response = post_json(client, "/api/answers", {"question": LAMBDA}, **extra)
        assert response.status_code == 403
        assert Question.objects.count() == before
    # The control: the same request with the token is accepted.
    token = csrf_token(client)
    response = post_json(client, "/api/answers", {"question": LAMBDA}, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200
    assert Question.objects.count() == before + 1


@pytest.mark.django_db
def test_feedback_over_the_session_without_the_csrf_token_is_refused(asker, scripted):
    done = async_to_sync(pipeline.answer_question)(user=asker, question=LAMBDA)
    path = f"/api/answers/{done.answer.answer_id}/feedback"
    client = csrf_client(asker)
    response = post_json(client, path, {"rating": "down", "comment": "forged"})
    assert response.status_code == 403
    assert Feedback.objects.count() == 0
    response = post_json(client, path, {"rating": "up"}, HTTP_X_CSRFTOKEN=csrf_token(client))
    assert response.status_code == 200
    assert Feedback.objects.get().rating == "up"


@pytest.mark.django_db
def test_logging_out_without_the_csrf_token_is_refused(asker):
    client = csrf_client(asker)
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/").status_code == 200  # still logged in
    token = csrf_token(client)
    assert client.post("/accounts/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302  # to the login page


@pytest.mark.django_db
def test_admin_changes_without_the_csrf_token_are_refused(admin_user, asker, scripted):
    done = async_to_sync(pipeline.answer_question)(user=asker, question=LAMBDA)
    answer = Answer.objects.get(pk=done.answer.answer_id)
    url = reverse("admin:answers_answer_change", args=[answer.pk])
    client = csrf_client(admin_user)
    html = client.get(url).content.decode()
    prefix = re.search(r'name="([\w-]+)-TOTAL_FORMS"', html)
    assert prefix is not None
    p = prefix.group(1)
    data = {
        f"{p}-TOTAL_FORMS": "0", f"{p}-INITIAL_FORMS": "0", f"{p}-MIN_NUM_FORMS": "0",
        f"{p}-MAX_NUM_FORMS": "1000", "reviewed": "on", "review_note": "forged",
    }  # fmt: skip
    assert client.post(url, data).status_code == 403
    answer.refresh_from_db()
    assert (answer.reviewed, answer.review_note) == (False, "")
    data["csrfmiddlewaretoken"] = client.cookies["csrftoken"].value
    assert client.post(url, data).status_code == 302
    answer.refresh_from_db()
    assert (answer.reviewed, answer.review_note) == (True, "forged")


# --- (17) production-like settings pass Django's deployment checklist --------------------


@pytest.mark.django_db
def test_production_like_settings_pass_the_deploy_checks(settings, capsys):
    settings.DEBUG = False
    settings.SECRET_KEY = secrets.token_urlsafe(64)
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = True
    settings.SESSION_COOKIE_SECURE = True
    settings.CSRF_COOKIE_SECURE = True
    settings.ALLOWED_HOSTS = ["answers.example.com"]
    call_command("check", "--deploy", "--fail-level", "WARNING")
    assert "no issues" in capsys.readouterr().out
    # The hardening the project sets itself, whatever the environment says.
    assert settings.SESSION_COOKIE_HTTPONLY is True
    assert settings.X_FRAME_OPTIONS == "DENY"
    assert settings.SECURE_CONTENT_TYPE_NOSNIFF is True


@pytest.mark.django_db
def test_a_weak_production_setting_is_caught_by_the_deploy_checks(settings):
    """The control: the check really runs against these settings."""
    from django.core.management.base import SystemCheckError

    settings.DEBUG = False
    settings.SECRET_KEY = secrets.token_urlsafe(64)
    settings.ALLOWED_HOSTS = ["answers.example.com"]
    settings.SESSION_COOKIE_SECURE = False
    with pytest.raises(SystemCheckError, match=r"security\.W012"):
        call_command("check", "--deploy", "--fail-level", "WARNING")


# --- (18) oversized input is refused before any retrieval work --------------------------


class Tripwire:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.calls += 1
        raise RuntimeError("retrieval must not run for this request")


@pytest.fixture
def retrieval_tripwire(monkeypatch):
    """Every way into retrieval raises and is counted."""
    wire = Tripwire()
    monkeypatch.setattr(retrieval, "search_hits", wire)
    monkeypatch.setattr(pipeline, "search_hits", wire)  # the name the pipeline calls
    monkeypatch.setattr(sqlite_fts5.SQLiteFTS5Backend, "search", wire)
    return wire


@pytest.mark.django_db
@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_an_over_long_question_is_refused_before_retrieval(
    client, asker, retrieval_tripwire, accept
):
    limit = int(answers_settings.MAX_QUESTION_LENGTH)
    before = Question.objects.count()
    response = post_json(
        client, "/api/answers", {"question": "lambda " * (limit // 7 + 1)},
        HTTP_ACCEPT=accept, **bearer(asker),
    )  # fmt: skip
    assert response.status_code == 422
    assert response["Content-Type"].startswith("application/json")
    assert retrieval_tripwire.calls == 0
    assert Question.objects.count() == before
    # The control: the tripwire is on the path a question of allowed length takes.
    with pytest.raises(RuntimeError):
        async_to_sync(pipeline.start_answer)(user=asker, question="lambda " * (limit // 8))
    assert retrieval_tripwire.calls == 1


@pytest.mark.django_db(transaction=True)
async def test_oversized_socket_messages_are_refused_before_retrieval(
    corpus, asker, retrieval_tripwire
):
    limit = int(answers_settings.MAX_QUESTION_LENGTH)
    before = await Question.objects.acount()
    comm = scoped_socket(asker)
    assert (await comm.connect())[0]
    frames = [
        (json.dumps({"type": "ask", "question": "x" * (limit * 6 + 2048)}), "too_large"),
        (json.dumps({"type": "ask", "question": "é" * (limit * 7)}), "too_large"),
        (json.dumps({"type": "ask", "question": "lambda " * (limit // 7 + 1)}), "invalid_question"),
        ("[" * (limit * 6 + 2048), "too_large"),
    ]
    for frame, code in frames:
        await comm.send_to(text_data=frame)
        messages = await receive_until_final(comm)
        assert [(m["type"], m["code"]) for m in messages] == [("error", code)]
    assert retrieval_tripwire.calls == 0
    assert await Question.objects.acount() == before
    await comm.disconnect()


# --- (14) only the site's own pages may open a socket -----------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "origin",
    [
        (b"origin", b"https://evil.example"),
        (b"origin", b"https://testserver.evil.example"),
        (b"origin", b"null"),
        None,
    ],
)
async def test_a_socket_from_a_foreign_or_missing_origin_is_refused(corpus, asker, client, origin):
    comm = await session_socket(client, asker, origin=origin)
    connected, _ = await comm.connect()
    assert not connected


@pytest.mark.django_db(transaction=True)
async def test_a_socket_from_the_sites_own_origin_is_accepted(corpus, asker, client):
    """The control for the test above, with the same session cookie."""
    comm = await session_socket(client, asker)
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_socket_without_a_valid_session_is_refused(corpus):
    comm = WebsocketCommunicator(
        application,
        "/ws/answers/",
        headers=[
            (b"host", b"testserver"),
            (b"origin", b"http://testserver"),
            (b"cookie", b"sessionid=forged-session-key"),
        ],
    )
    connected, code = await comm.connect()
    assert not connected and code == 4401


# --- (11) an open socket follows its user's access as it changes ------------------------


async def _ask_on(comm: WebsocketCommunicator, question: str) -> list[dict]:
    await comm.send_json_to({"type": "ask", "question": question})
    return await receive_until_final(comm)


def _deactivate(user: User) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)


def _revoke_ask(user: User) -> None:
    User.objects.get(pk=user.pk).user_permissions.remove(
        Permission.objects.get(codename="ask_question")
    )


def _end_sessions(user: User) -> None:
    from django.contrib.sessions.models import Session

    Session.objects.all().delete()  # logged out elsewhere, or the session expired


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_deactivate, id="deactivated"),
        pytest.param(_revoke_ask, id="ask-permission-revoked"),
        pytest.param(_end_sessions, id="session-ended"),
    ],
)
async def test_an_open_socket_stops_answering_a_user_who_lost_access(corpus, asker, client, change):
    comm = await session_socket(client, asker)
    assert (await comm.connect())[0]
    assert (await _ask_on(comm, LAMBDA))[-1]["type"] == "done"  # the control
    await database_sync_to_async(change)(asker)
    messages = await _ask_on(comm, LAMBDA)
    assert messages[0]["type"] == "error", [m["type"] for m in messages[:3]]
    assert not any(m.get("references") for m in messages)
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_an_open_socket_stops_showing_a_group_the_user_left(corpus, member, client):
    comm = await session_socket(client, member)
    assert (await comm.connect())[0]

    def restricted_titles(messages: list[dict]) -> set[str]:
        return {
            r["title"]
            for m in messages
            for r in m.get("references", [])
            if r["title"] in RESTRICTED
        }

    assert restricted_titles(await _ask_on(comm, NIGHTJAR))  # the control: a member sees them
    vault = await Group.objects.aget(name="vault")
    await database_sync_to_async(lambda: User.objects.get(pk=member.pk).groups.remove(vault))()
    messages = await _ask_on(comm, NIGHTJAR)
    assert messages[-1]["type"] == "done"
    assert restricted_titles(messages) == set()
    blob = json.dumps(messages)
    assert "hangar nine" not in blob and "helium" not in blob
    await comm.disconnect()


@pytest.mark.django_db
def test_a_deactivated_users_api_token_stops_working_at_once(client, asker):
    headers = bearer(asker)
    assert client.get("/api/answers", **headers).status_code == 200
    _deactivate(asker)
    assert client.get("/api/answers", **headers).status_code == 401
    response = post_json(client, "/api/answers", {"question": LAMBDA}, **headers)
    assert response.status_code == 401
