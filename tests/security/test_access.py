"""Access: nobody sees a document they may not view, or anyone else's answers.

Documents are open to everyone who may ask, or restricted to groups; answers and
conversations belong to the user who asked. Both hold on every surface: the prompt the
model sees, the streamed events, the stored answer, its page, and every REST route.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync
from bs4 import BeautifulSoup
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from answers import pipeline, presenters, selectors, services
from answers.citations import iter_markers
from answers.models import Answer, Document, Feedback, Question, RetrievedSource
from answers.panels import FINAL, PROVISIONAL, render_sources_panel
from tests.helpers import api_post, ask, assert_json_error, bearer
from tests.sockets import receive_until_final, scoped_socket

# --- (9) a random access matrix ---------------------------------------------------------

SHARED = "quokka marmalade xylophone"  # in every matrix document and in the question
UNIQUE = ["albatross", "bassoon", "cormorant", "dulcimer", "egret", "flugelhorn", "gannet",
          "harpsichord"]  # fmt: skip
QUESTION = "Tell me about quokka marmalade xylophone"
MATRIX = "secmatrix"

Restriction = frozenset[int] | None  # None: open to everyone who may ask


@dataclass(frozen=True)
class Matrix:
    groups: int
    documents: list[Restriction]
    later: list[Restriction]  # the same documents' access after everyone has asked
    users: list[tuple[frozenset[int], bool]]  # (groups, is_superuser)


@st.composite
def matrices(draw: st.DrawFn) -> Matrix:
    n_groups = draw(st.integers(2, 4))
    subsets = st.frozensets(st.integers(0, n_groups - 1))
    restriction = st.one_of(st.none(), subsets)  # an empty set: restricted to nobody
    documents = draw(st.lists(restriction, min_size=4, max_size=8))
    later = draw(st.lists(restriction, min_size=len(documents), max_size=len(documents)))
    users = draw(
        st.lists(
            st.tuples(subsets, st.integers(0, 5).map(lambda n: n == 0)), min_size=2, max_size=3
        )
    )
    return Matrix(n_groups, documents, later, users)


def may_view(restriction: Restriction, groups: frozenset[int], superuser: bool) -> bool:
    return superuser or restriction is None or bool(restriction & groups)


def _apply(document: Document, restriction: Restriction, groups: list[Group]) -> None:
    if restriction is None:
        document.access = Document.Access.EVERYONE
        document.save(update_fields=["access"])
        document.groups.clear()
    else:
        document.access = Document.Access.GROUPS
        document.save(update_fields=["access"])
        document.groups.set([groups[g] for g in restriction])


def _build(matrix: Matrix) -> tuple[list[Group], list[Document], list[User]]:
    # Hypothesis runs every example inside the test's one transaction: start clean.
    Document.objects.filter(source_key__startswith=f"{MATRIX}:").delete()
    User.objects.filter(username__startswith=f"{MATRIX}-").delete()
    Group.objects.filter(name__startswith=f"{MATRIX}-").delete()
    groups = [Group.objects.create(name=f"{MATRIX}-g{i}") for i in range(matrix.groups)]
    documents = []
    for i, restriction in enumerate(matrix.documents):
        word = UNIQUE[i]
        document = services.document_ingest(
            source_key=f"{MATRIX}:{i}",
            title=f"Matrix {word}",
            body=f"{SHARED} {word}. The {word} is a {SHARED} {word}.",
            chunk_size=1200,
        ).document
        _apply(document, restriction, groups)
        documents.append(document)
    ask = Permission.objects.get(codename="ask_question")
    users = []
    for j, (member_of, superuser) in enumerate(matrix.users):
        user = User.objects.create_user(
            username=f"{MATRIX}-u{j}", password="pw", is_superuser=superuser
        )
        user.user_permissions.add(ask)
        user.groups.set([groups[g] for g in member_of])
        users.append(user)
    return groups, documents, users


def _ask(user: User) -> list[pipeline.Event]:
    async def run() -> list[pipeline.Event]:
        answer_run = await pipeline.start_answer(user=user, question=QUESTION)
        return [event async for event in answer_run.events()]

    return async_to_sync(run)()


def _ids(references: Iterable[object]) -> set[int]:
    return {r.document_id for r in references}  # type: ignore[attr-defined]


def _assert_shows_only(html: str, visible: set[int], hidden_words: set[str]) -> None:
    soup = BeautifulSoup(html, "html.parser")
    shown = {int(li["data-document-id"]) for li in soup.select("[data-document-id]")}
    assert shown <= visible, (shown, visible)
    for word in hidden_words:
        assert word not in html


@pytest.mark.django_db
@hypothesis_settings(
    deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(matrix=matrices())
def test_every_surface_shows_only_documents_the_user_may_view(
    matrix, scripted, quiet_questions, settings, client
):
    settings.ANSWERS = {**settings.ANSWERS, "SCORE_THRESHOLD": 0.0, "MAX_SOURCES": 20}
    scripted.script = [" ".join(f"claim [{n}]" for n in range(1, 21))]
    groups, documents, users = _build(matrix)
    stored: list[tuple[User, int, set[int]]] = []
    for user, (member_of, superuser) in zip(users, matrix.users, strict=True):
        visible = {
            d.pk
            for d, r in zip(documents, matrix.documents, strict=True)
            if may_view(r, member_of, superuser)
        }
        hidden = {d.title.split()[-1] for d in documents if d.pk not in visible}
        scripted.prompts = []
        events = _ask(user)
        references, *middle, done = events
        assert isinstance(references, pipeline.ReferencesEvent)
        assert isinstance(done, pipeline.DoneEvent)
        matrix_ids = {d.pk for d in documents}
        # What the model saw: exactly the visible documents (so the test is not vacuous).
        if visible:
            prompt = scripted.prompts[-1]
            assert {s.document_id for s in prompt.sources} & matrix_ids == visible
            assert all(word not in prompt.sources_block() for word in hidden)
        else:
            assert scripted.prompts == [] and done.answer.status == "no_answer"
        # The streamed events, the final text and references, the server-rendered panels.
        assert _ids(references.references) <= visible
        cited = {e.document_id for e in middle if isinstance(e, pipeline.CitationEvent)}
        assert cited <= visible
        assert _ids(done.answer.references) <= visible
        count = len(done.answer.references)
        assert all(1 <= n <= count for m in iter_markers(done.answer.text) for n in m.numbers)
        blob = json.dumps([e.to_dict() for e in events])
        assert all(word not in blob for word in hidden)
        answer_id = done.answer.answer_id
        for refs, state in ((references.references, PROVISIONAL), (done.answer.references, FINAL)):
            panel = render_sources_panel(references=refs, answer_id=answer_id, state=state)
            _assert_shows_only(panel, visible, hidden)
        stored.append((user, answer_id, visible))

    # Stored answers re-check access for the viewer, now and after access changes.
    for phase in ("as asked", "after access changed"):
        if phase == "after access changed":
            for document, restriction in zip(documents, matrix.later, strict=True):
                _apply(document, restriction, groups)
        for (user, answer_id, _), (member_of, superuser) in zip(stored, matrix.users, strict=True):
            restrictions = matrix.documents if phase == "as asked" else matrix.later
            visible = {
                d.pk
                for d, r in zip(documents, restrictions, strict=True)
                if may_view(r, member_of, superuser)
            }
            hidden = {d.title.split()[-1] for d in documents if d.pk not in visible}
            payload = presenters.answer_payload(answer=Answer.objects.get(pk=answer_id), user=user)
            available = [r for r in payload.references if r.available]
            assert _ids(available) <= visible, phase
            assert all(word not in json.dumps(payload.to_dict()) for word in hidden), phase
            client.force_login(user)
            response = client.get(f"/answers/{answer_id}/")
            assert response.status_code == 200
            page = response.content.decode()
            soup = BeautifulSoup(page, "html.parser")
            shown = {
                int(li["data-document-id"])
                for li in soup.select("li.source")
                if li.select_one("a.source-title")
            }
            assert shown <= visible, phase
            assert all(word not in page for word in hidden), phase

        # Withheld (issue 14): exactly the answers written from a document the viewer may
        # not view now, for their owner and for any reviewer in the admin alike.
        visible_now = [
            {
                d.pk
                for d, r in zip(documents, restrictions, strict=True)
                if may_view(r, member_of, superuser)
            }
            for member_of, superuser in matrix.users
        ]
        for (owner, answer_id, _), owner_visible in zip(stored, visible_now, strict=True):
            prompt_docs = {d.pk for d in documents} & set(
                RetrievedSource.objects.filter(
                    question__answer=answer_id, prompt_number__isnull=False
                ).values_list("document_id", flat=True)
            )
            payload = presenters.answer_payload(answer=Answer.objects.get(pk=answer_id), user=owner)
            assert payload.withheld == bool(prompt_docs - owner_visible), phase
            assert (payload.text == selectors.WITHHELD_MESSAGE) == payload.withheld, phase
            for reviewer, reviewer_visible in zip(users, visible_now, strict=True):
                listed = selectors.answer_admin_queryset(reviewer=reviewer).filter(pk=answer_id)
                assert listed.exists() == (prompt_docs <= reviewer_visible), phase


# --- (12) someone else's answers and conversations -------------------------------------


@pytest.fixture
def two_answers(asker, other_asker, scripted):
    """One stored answer each for ``asker`` (mine) and ``other_asker`` (theirs)."""
    scripted.script = ["Lambdas are small functions [1]."]
    mine = ask(user=asker, question="What is a lambda expression?")
    theirs = ask(user=other_asker, question="What is a lambda expression?")
    assert isinstance(mine, pipeline.DoneEvent) and isinstance(theirs, pipeline.DoneEvent)
    return mine.answer, theirs.answer


def _counts() -> tuple[int, int, int]:
    return Question.objects.count(), Answer.objects.count(), Feedback.objects.count()


def _missing_id() -> int:
    return (Answer.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1000


AUTH_MODES = ["bearer", "session"]


def _credentials(client: Client, user: User, mode: str) -> dict[str, str]:
    if mode == "bearer":
        return bearer(user)
    client.force_login(user)
    return {}


@pytest.mark.django_db
@pytest.mark.parametrize("mode", AUTH_MODES)
def test_someone_elses_answer_is_not_found_like_a_missing_one(client, asker, two_answers, mode):
    mine, theirs = two_answers
    headers = _credentials(client, asker, mode)
    assert client.get(f"/api/answers/{mine.answer_id}", **headers).status_code == 200
    response = client.get(f"/api/answers/{theirs.answer_id}", **headers)
    missing = client.get(f"/api/answers/{_missing_id()}", **headers)
    assert response.status_code == missing.status_code == 404
    assert response.json() == missing.json()
    listed = client.get("/api/answers", **headers).json()
    assert theirs.answer_id not in {item["answer_id"] for item in listed["items"]}


@pytest.mark.django_db
@pytest.mark.parametrize("mode", AUTH_MODES)
def test_feedback_on_someone_elses_answer_is_not_found_and_stores_nothing(
    client, asker, two_answers, mode
):
    mine, theirs = two_answers
    headers = _credentials(client, asker, mode)
    before = _counts()
    path = f"/api/answers/{theirs.answer_id}/feedback"
    response = api_post(client, path, {"rating": "down", "comment": "x"}, **headers)
    assert response.status_code == 404
    assert _counts() == before
    assert not Feedback.objects.filter(answer_id=theirs.answer_id).exists()
    # The control: my own answer takes feedback through the same route.
    path = f"/api/answers/{mine.answer_id}/feedback"
    assert api_post(client, path, {"rating": "up"}, **headers).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("mode", AUTH_MODES)
@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_asking_in_someone_elses_conversation_is_not_found_and_stores_nothing(
    client, asker, two_answers, mode, accept
):
    mine, theirs = two_answers
    headers = {**_credentials(client, asker, mode), "HTTP_ACCEPT": accept}
    before = _counts()
    body = {"question": "and what about def?", "conversation_id": theirs.conversation_id}
    assert_json_error(api_post(client, "/api/answers", body, **headers), 404, "not_found")
    assert _counts() == before
    assert Question.objects.filter(conversation_id=theirs.conversation_id).count() == 1
    # The control: my own conversation continues through the same route.
    body["conversation_id"] = mine.conversation_id
    assert api_post(client, "/api/answers", body, **headers).status_code == 200


@pytest.mark.django_db
def test_someone_elses_answer_page_is_not_found(client, asker, two_answers):
    mine, theirs = two_answers
    client.force_login(asker)
    assert client.get(f"/answers/{mine.answer_id}/").status_code == 200
    response = client.get(f"/answers/{theirs.answer_id}/")
    assert response.status_code == 404
    assert client.get(f"/answers/{_missing_id()}/").status_code == 404
    listing = client.get("/answers/").content.decode()  # the history: conversations
    assert f"/conversations/{mine.conversation_id}/" in listing
    assert f"/conversations/{theirs.conversation_id}/" not in listing


# --- reading is for those who may ask ---------------------------------------------------


def _revoke_ask(user: User) -> User:
    user.user_permissions.remove(Permission.objects.get(codename="ask_question"))
    return User.objects.get(pk=user.pk)  # a fresh object: no permission cache


@pytest.mark.django_db
@pytest.mark.parametrize("mode", AUTH_MODES)
def test_a_user_whose_ask_permission_is_revoked_reads_nothing_more(
    client, asker, two_answers, mode
):
    # docs/access.md: pages, API and socket are for those who may ask; a revoked user's own
    # answers, conversations and the documents go as a missing id does, on every route.
    mine, _ = two_answers
    document = Document.objects.filter(access=Document.Access.EVERYONE).first()
    assert document is not None
    headers = _credentials(client, asker, mode)
    assert client.get(f"/api/answers/{mine.answer_id}", **headers).status_code == 200

    revoked = _revoke_ask(asker)
    if mode == "session":
        client.force_login(revoked)
    missing = client.get(f"/api/answers/{_missing_id()}", **headers)
    for path in (f"/api/answers/{mine.answer_id}", f"/api/answers/{mine.answer_id}/events"):
        response = client.get(path, **headers)
        assert (response.status_code, response.json()) == (404, missing.json()), path
    assert client.get("/api/answers", **headers).json()["items"] == []
    before = _counts()
    feedback = f"/api/answers/{mine.answer_id}/feedback"
    assert api_post(client, feedback, {"rating": "up"}, **headers).status_code == 404
    stop = f"/api/answers/{mine.answer_id}/stop"
    assert api_post(client, stop, {}, **headers).status_code == 404
    assert _counts() == before
    assert selectors.answer_list_for_user(user=revoked).count() == 0
    if mode == "session":
        for path in (
            f"/answers/{mine.answer_id}/",
            f"/conversations/{mine.conversation_id}/",
            f"/documents/{document.pk}/",
        ):
            assert client.get(path).status_code == 404, path
        assert (
            f"/conversations/{mine.conversation_id}/"
            not in client.get("/answers/").content.decode()
        )


@pytest.mark.django_db
def test_a_user_who_may_not_ask_cannot_walk_the_documents(client, no_ask_user):
    client.force_login(no_ask_user)
    document = Document.objects.filter(access=Document.Access.EVERYONE).first()
    assert document is not None
    assert client.get(f"/documents/{document.pk}/").status_code == 404
    missing = (Document.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
    assert client.get(f"/documents/{missing}/").status_code == 404


@pytest.mark.django_db
def test_reads_cost_no_query_for_the_ask_permission(asker, two_answers):
    # The permission is a condition of the read's own query (where it can be read as rows).
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    mine, _ = two_answers
    fresh = User.objects.get(pk=asker.pk)
    with CaptureQueriesContext(connection) as queries:
        selectors.answer_get_for_user(answer_id=mine.answer_id, user=fresh)
    assert len(queries) == 1


@pytest.mark.django_db(transaction=True)
async def test_asking_in_someone_elses_conversation_over_the_socket_is_not_found(
    corpus, asker, other_asker
):
    theirs = await pipeline.answer_question(user=other_asker, question="What is a lambda?")
    mine = await pipeline.answer_question(user=asker, question="What is a lambda?")
    assert isinstance(theirs, pipeline.DoneEvent) and isinstance(mine, pipeline.DoneEvent)
    before = await Question.objects.acount()
    comm = scoped_socket(asker)
    assert (await comm.connect(timeout=30))[0]
    for conversation in (theirs.answer.conversation_id, str(uuid.uuid4())):
        await comm.send_json_to(
            {"type": "ask", "question": "and def?", "conversation_id": conversation}
        )
        messages = await receive_until_final(comm)
        assert [m["type"] for m in messages] == ["error"]
        assert messages[0]["code"] == "not_found"
        assert "lambda" not in json.dumps(messages)
    assert await Question.objects.acount() == before
    # The control: my own conversation continues on the same socket.
    await comm.send_json_to(
        {"type": "ask", "question": "and def?", "conversation_id": mine.answer.conversation_id}
    )
    assert (await receive_until_final(comm))[-1]["type"] == "done"
    await comm.disconnect(timeout=30)
