from __future__ import annotations

import json
import re
import uuid

import pytest
from django.test import Client

from answers import pipeline, services
from answers.citations import iter_markers
from answers.conf import answers_settings
from answers.models import Answer, Document, Feedback, Question
from answers.pipeline import GENERIC_ERROR
from tests.helpers import api_get, api_post, assert_json_error, bearer, bearer_token, start

pytestmark = pytest.mark.django_db

LAMBDA = "What is a lambda expression?"
EXCEPTIONS = "How do exceptions and the try statement work?"
NIGHTJAR = "What is the Nightjar zeppelin launch plan?"
ANSWER_KEYS = {
    *("answer_id", "conversation_id", "turn", "status", "text", "html", "references"),
    "withheld",
}
REFERENCE_KEYS = {
    *("index", "document_id", "title", "url", "score", "excerpt", "anchor", "available"),
    "source_status",
}


def ask(client: Client, headers: dict[str, str], question: str, **extra: object):  # type: ignore[no-untyped-def]
    return api_post(client, "/api/answers", {"question": question, **extra}, **headers)


def restricted_ids() -> set[int]:
    return set(
        Document.objects.filter(source_key__startswith="vault:").values_list("pk", flat=True)
    )


# --- Bearer auth and the answer body ---------------------------------------------------


def test_bearer_token_ask_returns_the_documented_body(client, asker):
    response = ask(client, bearer(asker), LAMBDA)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == ANSWER_KEYS
    assert body["status"] == "complete" and body["withheld"] is False
    assert body["turn"] == 1
    uuid.UUID(body["conversation_id"])
    references = body["references"]
    assert references
    for reference in references:
        assert set(reference) == REFERENCE_KEYS
    k = len(references)
    assert [r["index"] for r in references] == list(range(1, k + 1))
    cited = [n for marker in iter_markers(body["text"]) for n in marker.numbers]
    assert cited, body["text"]
    assert all(1 <= n <= k for n in cited)
    for n in set(cited):
        assert f'href="#answer-{body["answer_id"]}-source-{n}"' in body["html"]
    stored = Answer.objects.get(pk=body["answer_id"])
    assert stored.question.user == asker
    assert stored.final_text == body["text"]


def test_citations_are_renumbered_and_out_of_range_markers_stripped(client, asker, scripted):
    scripted.script = ["Alpha [1] and gamma [3].", " Nothing [9]."]
    response = ask(client, bearer(asker), EXCEPTIONS)
    assert response.status_code == 200, response.content
    prompt = scripted.prompts[-1]
    assert len(prompt.sources) >= 3
    body = response.json()
    assert body["text"] == "Alpha [1] and gamma [2]. Nothing."
    assert [r["document_id"] for r in body["references"]] == [
        prompt.sources[0].document_id,
        prompt.sources[2].document_id,
    ]
    assert [r["index"] for r in body["references"]] == [1, 2]
    assert [r["title"] for r in body["references"]] == [
        prompt.sources[0].title,
        prompt.sources[2].title,
    ]
    prefix = f"answer-{body['answer_id']}-source"
    assert f'href="#{prefix}-1"' in body["html"]
    assert f'href="#{prefix}-2"' in body["html"]
    assert f'href="#{prefix}-3"' not in body["html"]
    assert "[9]" not in body["html"]


def test_answer_citing_nothing_keeps_every_prompt_source_in_order(client, asker, scripted):
    scripted.script = ["Exceptions are raised ", "and caught."]
    response = ask(client, bearer(asker), EXCEPTIONS)
    assert response.status_code == 200, response.content
    body = response.json()
    prompt = scripted.prompts[-1]
    assert prompt.sources
    assert body["text"] == "Exceptions are raised and caught."
    assert [r["document_id"] for r in body["references"]] == [s.document_id for s in prompt.sources]
    assert [r["index"] for r in body["references"]] == list(range(1, len(prompt.sources) + 1))


@pytest.mark.parametrize(
    "script",
    [["Alpha [1] and gamma [3].", " Nothing [9]."], ["No citations at all."]],
    ids=["cited", "fallback"],
)
def test_get_answer_returns_what_post_returned(client, asker, scripted, script):
    scripted.script = script
    headers = bearer(asker)
    created = ask(client, headers, EXCEPTIONS)
    assert created.status_code == 200, created.content
    fetched = client.get(f"/api/answers/{created.json()['answer_id']}", **headers)
    assert fetched.status_code == 200, fetched.content
    assert fetched.json() == created.json()


# --- Listing --------------------------------------------------------------------------


def test_list_shows_only_own_answers_newest_first_with_pagination(
    client, asker, other_asker, scripted
):
    mine = bearer(asker)
    questions = [LAMBDA, EXCEPTIONS, "What does the yield expression do?"]
    ids = []
    for question in questions:
        response = ask(client, mine, question)
        assert response.status_code == 200, response.content
        ids.append(response.json()["answer_id"])
    theirs = ask(client, bearer(other_asker), LAMBDA)
    assert theirs.status_code == 200

    full = client.get("/api/answers", **mine)
    assert full.status_code == 200
    body = full.json()
    assert body["count"] == 3
    assert [item["answer_id"] for item in body["items"]] == ids[::-1]
    assert [item["question"] for item in body["items"]] == questions[::-1]
    assert theirs.json()["answer_id"] not in [item["answer_id"] for item in body["items"]]

    page = client.get("/api/answers?limit=1&offset=1", **mine).json()
    assert page["count"] == 3
    assert (page["limit"], page["offset"]) == (1, 1)
    assert [item["answer_id"] for item in page["items"]] == [ids[1]]

    past_end = client.get("/api/answers?limit=5&offset=3", **mine).json()
    assert past_end["items"] == []
    assert past_end["count"] == 3

    assert client.get("/api/answers?limit=0", **mine).status_code == 422
    assert client.get("/api/answers?limit=101", **mine).status_code == 422
    assert client.get("/api/answers?offset=-1", **mine).status_code == 422


# --- Feedback -------------------------------------------------------------------------


def test_feedback_is_stored_and_replaced(client, asker, scripted):
    headers = bearer(asker)
    answer_id = ask(client, headers, LAMBDA).json()["answer_id"]
    url = f"/api/answers/{answer_id}/feedback"

    first = api_post(client, url, {"rating": "up", "comment": "Clear."}, **headers)
    assert first.status_code == 200, first.content
    assert first.json() == {"answer_id": answer_id, "rating": "up", "comment": "Clear."}

    second = api_post(client, url, {"rating": "down", "comment": "Actually wrong."}, **headers)
    assert second.status_code == 200, second.content
    assert second.json()["rating"] == "down"
    rows = list(Feedback.objects.filter(answer_id=answer_id))
    assert len(rows) == 1
    assert (rows[0].user, rows[0].rating, rows[0].comment) == (asker, "down", "Actually wrong.")

    invalid = api_post(client, url, {"rating": "meh"}, **headers)
    assert_json_error(invalid, 422)
    assert Feedback.objects.get(answer_id=answer_id).rating == "down"


def test_feedback_again_without_a_comment_keeps_the_comment(client, asker, scripted):
    headers = bearer(asker)
    answer_id = ask(client, headers, LAMBDA).json()["answer_id"]
    url = f"/api/answers/{answer_id}/feedback"
    api_post(client, url, {"rating": "down", "comment": "Misses the default arguments."}, **headers)

    changed = api_post(client, url, {"rating": "up"}, **headers)  # a second click, no comment
    assert changed.status_code == 200, changed.content
    assert changed.json() == {
        "answer_id": answer_id,
        "rating": "up",
        "comment": "Misses the default arguments.",
    }
    cleared = api_post(client, url, {"rating": "up", "comment": ""}, **headers)
    assert cleared.json()["comment"] == ""
    assert Feedback.objects.get(answer_id=answer_id).comment == ""


def test_feedback_validation_and_auth(client, asker, scripted):
    headers = bearer(asker)
    answer_id = ask(client, headers, LAMBDA).json()["answer_id"]
    url = f"/api/answers/{answer_id}/feedback"
    assert_json_error(
        api_post(client, url, {"rating": "up", "comment": "x" * 4001}, **headers), 422
    )
    assert_json_error(api_post(client, url, {"comment": "no rating"}, **headers), 422)
    # PostgreSQL's text cannot hold NUL: refused as invalid on every database, not a 500.
    assert_json_error(api_post(client, url, {"rating": "up", "comment": "a\x00b"}, **headers), 422)
    assert_json_error(api_post(client, url, {"rating": "up"}), 401)
    assert not Feedback.objects.filter(answer_id=answer_id).exists()
    ok = api_post(client, url, {"rating": "up"}, **headers)
    assert ok.status_code == 200
    assert ok.json()["comment"] == ""


def test_feedback_on_an_answer_still_streaming_is_409(client, asker, scripted):
    run = start(user=asker, question=LAMBDA)
    assert run.answer.status == Answer.Status.STREAMING
    response = api_post(
        client, f"/api/answers/{run.answer.pk}/feedback", {"rating": "up"}, **bearer(asker)
    )
    assert_json_error(response, 409)
    assert response.json()["answer_id"] == run.answer.pk
    assert response.json()["status"] == "streaming"
    assert not Feedback.objects.filter(answer_id=run.answer.pk).exists()


# --- Session auth and CSRF ------------------------------------------------------------


def test_session_auth_works_for_get(client, asker, scripted):
    answer_id = ask(client, bearer(asker), LAMBDA).json()["answer_id"]
    session = Client()
    session.force_login(asker)
    listed = session.get("/api/answers")
    assert listed.status_code == 200
    assert [item["answer_id"] for item in listed.json()["items"]] == [answer_id]
    assert session.get(f"/api/answers/{answer_id}").status_code == 200


def test_session_post_needs_the_csrf_token(asker, scripted, settings):
    # The manifest only exists after collectstatic; the login page needs its static URLs.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    session = Client(enforce_csrf_checks=True)
    session.force_login(asker)
    before = Question.objects.count()

    refused = ask(session, {}, LAMBDA)
    assert refused.status_code in (401, 403)
    assert Question.objects.count() == before

    assert session.get("/accounts/login/").status_code == 200
    token = session.cookies["csrftoken"].value
    accepted = ask(session, {"HTTP_X_CSRFTOKEN": token}, LAMBDA)
    assert accepted.status_code == 200, accepted.content
    assert Question.objects.count() == before + 1
    assert Question.objects.get(answer__pk=accepted.json()["answer_id"]).user == asker


def test_session_of_inactive_user_is_refused(asker):
    session = Client()
    session.force_login(asker)
    asker.is_active = False
    asker.save()
    assert_json_error(session.get("/api/answers"), 401)


# --- Authentication failures ----------------------------------------------------------


def _revoked(user) -> dict[str, str]:  # type: ignore[no-untyped-def]
    token, raw = services.api_token_create(user=user, name="old")
    services.api_token_revoke(token=token)
    return bearer(raw=raw)


def _inactive(user) -> dict[str, str]:  # type: ignore[no-untyped-def]
    headers = bearer(user)
    user.is_active = False
    user.save()
    return headers


BAD_CREDENTIALS = pytest.mark.parametrize(
    "make_headers",
    [
        lambda user: {},
        _revoked,
        lambda user: bearer(raw="ca_not-a-real-token"),
        lambda user: bearer(raw=""),
        lambda user: {"HTTP_AUTHORIZATION": "Token " + bearer_token(user)},
        lambda user: bearer(raw="x" * 300),
        _inactive,
    ],
    ids=["none", "revoked", "unknown", "empty", "wrong-scheme", "overlong", "inactive-user"],
)


@BAD_CREDENTIALS
def test_bad_or_missing_credentials_get_401_on_reads(client, asker, scripted, make_headers):
    answer_id = ask(client, bearer(asker), LAMBDA).json()["answer_id"]
    headers = make_headers(asker)
    assert_json_error(client.get("/api/answers", **headers), 401)
    assert_json_error(client.get(f"/api/answers/{answer_id}", **headers), 401)


@BAD_CREDENTIALS
@pytest.mark.parametrize("csrf", [False, True], ids=["test-client", "real-client"])
def test_bad_or_missing_credentials_get_401_on_ask(asker, scripted, make_headers, csrf):
    """A service client has no CSRF cookie (``enforce_csrf_checks`` is what a real HTTP
    client gets): a bad token must still be told 401, not a CSRF failure."""
    client = Client(enforce_csrf_checks=csrf)
    headers = make_headers(asker)
    before = Question.objects.count()
    assert_json_error(ask(client, headers, LAMBDA), 401)
    assert Question.objects.count() == before
    assert scripted.prompts == []


def test_valid_bearer_token_needs_no_csrf_token(asker, scripted):
    client = Client(enforce_csrf_checks=True)
    assert ask(client, bearer(asker), LAMBDA).status_code == 200


def test_user_without_ask_permission_gets_403(client, no_ask_user, scripted):
    before = Question.objects.count()
    body = assert_json_error(ask(client, bearer(no_ask_user), LAMBDA), 403)
    assert body["detail"]
    assert Question.objects.count() == before
    assert scripted.prompts == []


# --- Invalid requests -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_body",
    [
        json.dumps({"question": ""}),
        json.dumps({"question": "   "}),
        json.dumps({"question": "\n\t "}),
        json.dumps({"question": "x" * 2001}),
        json.dumps({"question": "What is a lambda\x00 expression?"}),
        json.dumps({"question": 5}),
        json.dumps({"question": None}),
        json.dumps({"question": ["What is a lambda expression?"]}),
        json.dumps({}),
        json.dumps({"conversation_id": str(uuid.uuid4())}),
        json.dumps({"question": LAMBDA, "conversation_id": "not-a-uuid"}),
        json.dumps("What is a lambda expression?"),
        "{not json",
        "",
    ],
    ids=[
        "empty",
        "blank",
        "whitespace",
        "too-long",
        "nul",
        "int",
        "null",
        "list",
        "missing",
        "missing-question",
        "bad-conversation-id",
        "not-an-object",
        "malformed",
        "no-body",
    ],
)
def test_invalid_requests_are_refused_and_store_nothing(client, asker, scripted, raw_body):
    before = Question.objects.count()
    response = api_post(client, "/api/answers", raw_body, user=asker)
    assert_json_error(response, (400, 422))
    assert Question.objects.count() == before
    assert scripted.prompts == []


def test_question_at_the_length_limit_is_accepted(client, asker, scripted):
    limit = int(answers_settings.MAX_QUESTION_LENGTH)
    question = ("lambda expression " * limit)[:limit]
    assert ask(client, bearer(asker), question).status_code == 200


def test_max_question_length_setting_is_honoured(client, asker, scripted, settings):
    settings.ANSWERS = {**settings.ANSWERS, "MAX_QUESTION_LENGTH": 10}
    before = Question.objects.count()
    assert_json_error(ask(client, bearer(asker), LAMBDA), (400, 422))
    assert Question.objects.count() == before


# --- Conversations --------------------------------------------------------------------


def test_unknown_conversation_is_404(client, asker, scripted):
    before = Question.objects.count()
    response = ask(client, bearer(asker), LAMBDA, conversation_id=str(uuid.uuid4()))
    assert_json_error(response, 404)
    assert Question.objects.count() == before


def test_someone_elses_conversation_is_404_and_stores_nothing(client, asker, other_asker, scripted):
    theirs = ask(client, bearer(other_asker), LAMBDA).json()
    before = Question.objects.count()
    response = ask(client, bearer(asker), LAMBDA, conversation_id=theirs["conversation_id"])
    body = assert_json_error(response, 404)
    assert LAMBDA not in json.dumps(body)
    assert Question.objects.count() == before
    assert Question.objects.filter(conversation_id=theirs["conversation_id"]).count() == 1


def test_follow_up_continues_the_conversation(client, asker, scripted):
    headers = bearer(asker)
    first = ask(client, headers, LAMBDA).json()
    second = ask(client, headers, EXCEPTIONS, conversation_id=first["conversation_id"])
    assert second.status_code == 200, second.content
    body = second.json()
    assert body["conversation_id"] == first["conversation_id"]
    assert body["turn"] == 2
    assert body["answer_id"] != first["answer_id"]
    assert [t.question for t in scripted.prompts[-1].history] == [LAMBDA]


def test_elliptical_follow_up_is_answered(client, asker):
    headers = bearer(asker)
    first = ask(client, headers, LAMBDA).json()
    assert first["status"] == "complete"
    response = ask(
        client,
        headers,
        "and how does it differ from a def function?",
        conversation_id=first["conversation_id"],
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "complete"
    assert body["references"]
    assert body["text"] != answers_settings.NO_ANSWER_MESSAGE
    assert body["turn"] == 2


# --- Ownership ------------------------------------------------------------------------


def test_someone_elses_answer_is_404(client, asker, other_asker, scripted):
    theirs = ask(client, bearer(other_asker), LAMBDA).json()["answer_id"]
    headers = bearer(asker)
    assert_json_error(client.get(f"/api/answers/{theirs}", **headers), 404)
    response = api_post(client, f"/api/answers/{theirs}/feedback", {"rating": "down"}, **headers)
    assert_json_error(response, 404)
    assert not Feedback.objects.filter(answer_id=theirs).exists()


def test_missing_answer_is_404(client, asker):
    headers = bearer(asker)
    assert_json_error(client.get("/api/answers/999999", **headers), 404)
    assert_json_error(
        api_post(client, "/api/answers/999999/feedback", {"rating": "up"}, **headers), 404
    )


# --- No answer, access, failures ------------------------------------------------------


def test_off_topic_question_gets_the_no_answer_message(client, asker, scripted):
    response = ask(client, bearer(asker), "Who won the football world cup?")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "no_answer"
    assert body["text"] == answers_settings.NO_ANSWER_MESSAGE
    assert body["references"] == []
    assert scripted.prompts == []
    fetched = api_get(client, f"/api/answers/{body['answer_id']}", user=asker).json()
    assert fetched == body


def test_outsider_never_sees_restricted_documents_in_the_prompt(client, asker, scripted):
    scripted.script = ["Cited [1] [2] [3] [4] [5] [6]."]
    response = ask(client, bearer(asker), NIGHTJAR)
    assert response.status_code == 200, response.content
    hidden = restricted_ids()
    assert len(hidden) == 2
    assert not hidden & {r["document_id"] for r in response.json()["references"]}
    for prompt in scripted.prompts:
        assert not hidden & {s.document_id for s in prompt.sources}
        assert "Nightjar" not in " ".join(p for s in prompt.sources for p in s.passages)


def test_outsider_answer_does_not_leak_restricted_text(client, asker):
    response = ask(client, bearer(asker), NIGHTJAR)
    assert response.status_code == 200, response.content
    body = response.json()
    assert not restricted_ids() & {r["document_id"] for r in body["references"]}
    dumped = json.dumps(body).lower()
    assert "hangar" not in dumped
    assert "zeppelin launch programme" not in dumped


def test_member_gets_the_restricted_documents(client, member):
    response = ask(client, bearer(member), NIGHTJAR)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "complete"
    assert restricted_ids() & {r["document_id"] for r in body["references"]}


def test_member_sees_every_restricted_source_when_nothing_is_cited(client, member, scripted):
    response = ask(client, bearer(member), NIGHTJAR)
    assert response.status_code == 200, response.content
    assert restricted_ids() <= {r["document_id"] for r in response.json()["references"]}


def test_provider_failure_is_a_generic_502_and_stored_as_failed(client, asker, settings):
    settings.ANSWERS = {"PROVIDER": "tests.providers.ExplodingProvider"}
    response = ask(client, bearer(asker), LAMBDA)
    body = assert_json_error(response, 502)
    assert body["detail"] == GENERIC_ERROR
    dumped = json.dumps(body).lower()
    assert "secret" not in dumped
    assert "internal" not in dumped
    answer = Answer.objects.get(pk=body["answer_id"])
    assert answer.question.user == asker
    assert answer.status == Answer.Status.FAILED
    assert answer.raw_text == "Partial answer [1]"


# --- OpenAPI --------------------------------------------------------------------------


@pytest.mark.parametrize("logged_in", [False, True], ids=["anonymous", "logged-in"])
def test_openapi_schema_lists_every_operation(client, asker, logged_in):
    if logged_in:
        client.force_login(asker)
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    operations = {
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert operations == {
        ("POST", "/api/answers"),
        ("GET", "/api/answers"),
        ("GET", "/api/answers/{answer_id}"),
        ("POST", "/api/answers/{answer_id}/feedback"),
        ("GET", "/api/answers/{answer_id}/events"),
        ("POST", "/api/answers/{answer_id}/stop"),
    }


def test_docs_page_is_html(client):
    response = client.get("/api/docs")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert re.search(r"openapi\.json", response.content.decode())


def test_every_domain_refusal_has_its_http_status_in_the_one_table():
    from answers import api, selectors, services

    def subclasses(cls):  # type: ignore[no-untyped-def]
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    codes = {pipeline.AskRefused.code} | {cls.code for cls in subclasses(pipeline.AskRefused)}
    codes |= {services.AnswerStillStreaming.code, selectors.NotFound.code}
    assert codes <= set(api.HTTP_STATUS), codes - set(api.HTTP_STATUS)
    # The core carries no HTTP: no error of the app names a status of its own.
    for error in _errors_of_the_app():
        carried = {
            name: value
            for klass in error.__mro__
            if klass.__module__.startswith("answers.")
            for name, value in vars(klass).items()
        }
        assert not [name for name in carried if "status" in name], error
        assert not [
            value for value in carried.values() if isinstance(value, int) and 400 <= value < 600
        ], error


def _errors_of_the_app() -> list[type[Exception]]:
    """Every exception class the app's modules define (each module imported)."""
    import importlib
    import inspect
    import pkgutil

    import answers

    errors = []
    for module_info in pkgutil.walk_packages(answers.__path__, "answers."):
        if ".migrations" in module_info.name:
            continue
        module = importlib.import_module(module_info.name)
        errors += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, Exception)
            and value.__module__ == module.__name__
        ]
    assert len(errors) >= 10, errors  # the walk found them (AskRefused, NotFound, ...)
    return errors


def test_every_error_response_is_built_from_the_one_table():
    """api.py sets no status of its own: refusals go through ``_error`` and HTTP_STATUS."""
    import ast
    import inspect

    from answers import api

    calls = [
        node for node in ast.walk(ast.parse(inspect.getsource(api))) if isinstance(node, ast.Call)
    ]
    arguments = [arg for call in calls for arg in (*call.args, *(k.value for k in call.keywords))]
    numbers = {
        arg.value
        for arg in arguments
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and 400 <= arg.value < 600
    }
    assert not numbers, f"a status set by hand in api.py: {numbers}"
