"""Issue 14 (4): a stored answer written from a source its viewer can no longer see is
withheld everywhere (API, page, SSE resume, WebSocket resume and stored done) and never
enters a prompt again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from bs4 import BeautifulSoup
from django.contrib.auth.models import Group
from django.core.cache import cache

from answers import pipeline, services
from answers.models import Answer, Document, RetrievedSource
from tests.corpus import ingest_text
from tests.helpers import ask, bearer_headers, staff_reviewer
from tests.llm_server import serving
from tests.sockets import receive_until_final, scoped_socket
from tests.test_sse import SSE, iter_events

QUESTION = "Where does the Nightjar zeppelin launch from?"
# Words only the vault memo has: the extractive provider quotes them in its answer.
SECRET = "hangar nine"
VAULT_TITLES = ("Project Nightjar launch plan", "Nightjar zeppelin hangar safety")
# answers.selectors.WITHHELD_MESSAGE (spelled out: the test must also run without the fix).
WITHHELD_MESSAGE = "This answer is withheld: it draws on a source you can no longer access."
KESTREL = "Project Kestrel is stored in silo seven. The Kestrel silo is guarded at night."


def _leave_vault(user: Any) -> None:
    user.groups.remove(Group.objects.get(name="vault"))


def _assert_withheld(body: dict[str, Any]) -> None:
    blob = json.dumps(body)
    assert SECRET not in blob
    assert all(title not in blob for title in VAULT_TITLES)
    assert body["withheld"] is True
    assert body["text"] == WITHHELD_MESSAGE
    assert WITHHELD_MESSAGE in body["html"]
    assert body["references"], "the sources keep their numbers"
    assert all(reference["available"] is False for reference in body["references"])


@pytest.mark.django_db
def test_a_revoked_answer_is_withheld_from_the_api_and_the_page(client, member):  # type: ignore[no-untyped-def]
    done = ask(user=member, question=QUESTION)
    assert isinstance(done, pipeline.DoneEvent)
    answer_id = done.answer.answer_id
    headers = bearer_headers(member, name="t")
    before = client.get(f"/api/answers/{answer_id}", headers=headers).json()
    assert SECRET in before["text"] and before["withheld"] is False  # not vacuous

    _leave_vault(member)

    response = client.get(f"/api/answers/{answer_id}", headers=headers)
    assert response.status_code == 200
    _assert_withheld(response.json())

    client.force_login(member)
    page = client.get(f"/answers/{answer_id}/").content.decode()
    assert SECRET not in page
    assert all(title not in page for title in VAULT_TITLES)
    assert WITHHELD_MESSAGE in BeautifulSoup(page, "html.parser").select_one("[data-answer]").text
    # The question is the asker's own words: still shown to them (docs/access.md).
    assert QUESTION in page


@pytest.fixture
def http(daphne_live_server) -> Iterator[httpx.Client]:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=daphne_live_server.url, timeout=20.0) as client:
        yield client


def test_a_revoked_answer_is_withheld_from_an_sse_resume(http, member):  # type: ignore[no-untyped-def]
    headers = bearer_headers(member, name="t")
    with http.stream(
        "POST", "/api/answers", json={"question": QUESTION}, headers={**SSE, **headers}
    ) as response:
        asked = list(iter_events(response))
    assert asked[-1].event == "done" and SECRET in asked[-1].data["text"]  # not vacuous
    answer_id = asked[0].data["answer_id"]

    _leave_vault(member)

    # The live server still holds the answer's event log (tokens and all): resuming from
    # the start must not replay it.
    with http.stream("GET", f"/api/answers/{answer_id}/events", headers=headers) as response:
        assert response.status_code == 200
        resumed = list(iter_events(response))
    assert [(e.event, e.id) for e in resumed] == [("done", None)]
    _assert_withheld(resumed[0].data)
    stored = http.get(f"/api/answers/{answer_id}", headers=headers).json()
    _assert_withheld(stored)


@pytest.mark.django_db(transaction=True)
async def test_a_revoked_answer_is_withheld_from_a_socket_resume_and_stored_done(corpus, member):  # type: ignore[no-untyped-def]
    comm = scoped_socket(member)
    assert (await comm.connect(timeout=30))[0]
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    asked = await receive_until_final(comm)
    await comm.disconnect(timeout=30)
    assert asked[-1]["type"] == "done" and SECRET in asked[-1]["text"]  # not vacuous
    answer_id = asked[0]["answer_id"]

    await sync_to_async(_leave_vault)(member)

    for log in ("kept", "expired"):
        if log == "expired":
            await sync_to_async(cache.clear)()  # the stored done, from the database
        comm = scoped_socket(member)
        assert (await comm.connect(timeout=30))[0]
        await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": 0})
        messages = await receive_until_final(comm)
        await comm.disconnect(timeout=30)
        assert [m["type"] for m in messages] == ["done"], log
        (done,) = messages
        panel = done.pop("sources_html")
        assert SECRET not in panel and all(title not in panel for title in VAULT_TITLES)
        assert "Source no longer available" in panel
        _assert_withheld(done)


@pytest.fixture
def fake_llm(settings):  # type: ignore[no-untyped-def]
    """A real local OpenAI-protocol server: what it receives is what a model would read."""
    deltas = ["The Nightjar zeppelin launches from ", "hangar nine [1]."]
    with serving(settings, {"kind": "ok", "deltas": deltas}) as server:
        yield server


def _prompt_text(request: dict[str, Any]) -> str:
    return "\n".join(message["content"] for message in request["messages"])


@pytest.mark.django_db
def test_a_withheld_answer_never_enters_a_prompt_again(member, fake_llm):  # type: ignore[no-untyped-def]
    first = ask(user=member, question=QUESTION)
    assert isinstance(first, pipeline.DoneEvent) and SECRET in first.answer.text
    conversation = first.answer.conversation_id

    follow_up = "And who approves its budget?"
    ask(user=member, question=follow_up, conversation_id=conversation)
    assert SECRET in _prompt_text(fake_llm.requests[-1]), "history is sent while visible"

    _leave_vault(member)
    ask(user=member, question="What is a lambda expression?", conversation_id=conversation)
    prompt = _prompt_text(fake_llm.requests[-1])
    assert SECRET not in prompt
    assert all(title not in prompt for title in VAULT_TITLES)
    # The withheld turns leave the history whole, questions included.
    assert QUESTION not in prompt and follow_up not in prompt
    assert Answer.objects.filter(question__conversation_id=conversation).count() == 3


# --- a follow-up written while an earlier turn was readable ------------------------------
# Its prompt held that turn (question and answer) as history, so its text (and the
# rewrite it was searched with) may echo a source it never cited or was given: it depends
# on that source as much as the earlier answer does.

ECHO = "Unlike hangar nine, a lambda is a small anonymous function [1]."


def _turns_before_and_after_leaving(member: Any, llm: Any) -> tuple[int, int, str]:
    """Two turns while in vault (the second's sources all open to everyone), then the
    member leaves vault: the first answer's id, the second's, and the conversation."""
    llm.behaviours = [
        {"kind": "ok", "deltas": ["The Nightjar zeppelin launches from ", "hangar nine [1]."]},
        {"kind": "ok", "deltas": ["What is a lambda expression in Python?"]},  # the rewrite
        {"kind": "ok", "deltas": [ECHO]},
        {"kind": "ok", "deltas": ["What does the def statement do in Python?"]},
        {"kind": "ok", "deltas": ["A def statement defines a function [1]."]},
    ]
    first = ask(user=member, question=QUESTION)
    assert isinstance(first, pipeline.DoneEvent) and SECRET in first.answer.text
    conversation = first.answer.conversation_id
    second = ask(user=member, question="And what is a lambda?", conversation_id=conversation)
    assert isinstance(second, pipeline.DoneEvent) and SECRET in second.answer.text
    # Not vacuous: the follow-up was written from no vault source, only with the history.
    given = RetrievedSource.objects.filter(
        question__answer=second.answer.answer_id, prompt_number__isnull=False
    )
    assert given.exists()
    assert not given.exclude(document__access=Document.Access.EVERYONE).exists()
    assert SECRET in _prompt_text(llm.requests[2])
    return first.answer.answer_id, second.answer.answer_id, conversation


@pytest.fixture
def rewriting_llm(settings):  # type: ignore[no-untyped-def]
    with serving(settings, REWRITE_FOLLOWUPS=True, REWRITE_TIMEOUT=5.0) as server:
        yield server


@pytest.mark.django_db
def test_a_follow_up_written_with_a_revoked_turn_is_withheld_too(client, member, rewriting_llm):  # type: ignore[no-untyped-def]
    _, second_id, conversation = _turns_before_and_after_leaving(member, rewriting_llm)
    _leave_vault(member)

    response = client.get(f"/api/answers/{second_id}", headers=bearer_headers(member, name="t"))
    assert response.status_code == 200
    body = response.json()
    assert SECRET not in json.dumps(body)
    assert body["withheld"] is True and body["text"] == WITHHELD_MESSAGE

    # Nor does it carry the revoked turn into the next prompt or rewrite.
    third = ask(user=member, question="And def?", conversation_id=conversation)
    for request in rewriting_llm.requests[3:]:
        assert SECRET not in _prompt_text(request)
    # Written without either, the next turn is theirs to read.
    response = client.get(
        f"/api/answers/{third.answer.answer_id}", headers=bearer_headers(member, name="u")
    )
    assert response.json()["withheld"] is False


@pytest.mark.django_db
def test_a_reviewer_outside_vault_sees_no_follow_up_echoing_it(client, member, rewriting_llm):  # type: ignore[no-untyped-def]
    first_id, second_id, _ = _turns_before_and_after_leaving(member, rewriting_llm)
    client.force_login(staff_reviewer("outsider"))
    changelist = client.get("/admin/answers/answer/", {"q": "hangar"}).content.decode()
    assert SECRET not in changelist
    assert f"/admin/answers/answer/{second_id}/change/" not in changelist  # found by "hangar"
    for answer_id in (first_id, second_id):
        page = client.get(f"/admin/answers/answer/{answer_id}/change/", follow=True)
        assert SECRET not in page.content.decode(), answer_id


# --- a document restricted, then deleted -------------------------------------------------


@pytest.mark.django_db
def test_deleting_a_restricted_document_never_shows_an_answer_written_from_it(
    client, asker, scripted
):  # type: ignore[no-untyped-def]
    # Open to everyone when the answer was written, restricted since, then deleted: the
    # restriction was the last word on who may read it, and deleting it widens nothing.
    document = ingest_text("kestrel:memo", "Project Kestrel memo", KESTREL).document
    scripted.script = ["Kestrel is kept in ", "silo seven [1]."]
    done = ask(user=asker, question="Where is Project Kestrel kept?")
    assert isinstance(done, pipeline.DoneEvent) and "silo seven" in done.answer.text
    assert document.pk in {r.document_id for r in done.answer.references}  # not vacuous
    answer_id = done.answer.answer_id
    headers = bearer_headers(asker, name="t")

    document.access = Document.Access.GROUPS
    document.save(update_fields=["access"])
    document.groups.set([Group.objects.get_or_create(name="vault")[0]])
    assert client.get(f"/api/answers/{answer_id}", headers=headers).json()["withheld"] is True

    Document.objects.filter(pk=document.pk).delete()
    body = client.get(f"/api/answers/{answer_id}", headers=headers).json()
    assert body["withheld"] is True
    assert "silo seven" not in json.dumps(body) and "Kestrel memo" not in json.dumps(body)
    client.force_login(staff_reviewer("outsider"))
    page = client.get(f"/admin/answers/answer/{answer_id}/change/", follow=True)
    assert "silo seven" not in page.content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deleted", [False, True], ids=["restricted", "restricted-then-deleted"])
async def test_a_document_restricted_while_its_answer_is_written_is_not_public_in_it(
    corpus, asker, scripted, deleted
):  # type: ignore[no-untyped-def]
    # Restricted (and deleted) after retrieval read it as open, before the answer was
    # stored: writing the answer must not mark it as one everyone could view.
    from answers import presenters, streams

    document = (
        await sync_to_async(ingest_text)("kestrel:memo", "Project Kestrel memo", KESTREL)
    ).document
    scripted.script = ["Kestrel is kept in ", "silo seven [1]."]
    scripted.delay = 0.2
    asked = await streams.answer_stream_begin(
        user=asker, question="Where is Project Kestrel kept?", conversation_id=None
    )
    first = await anext(asked.events)
    assert document.pk in {r.document_id for r in first.event.references}  # not vacuous
    document.access = Document.Access.GROUPS
    await document.asave(update_fields=["access"])
    if deleted:
        await Document.objects.filter(pk=document.pk).adelete()
    events = [first, *[event async for event in asked.events]]
    assert "silo seven" in events[-1].event.answer.text  # written from it all the same

    answer = await Answer.objects.select_related("question").aget(pk=asked.answer_id)
    shown = await sync_to_async(presenters.answer_payload)(answer=answer, user=asker)
    assert shown.withheld and "silo seven" not in json.dumps(shown.to_dict())


# --- the turns a reviewer may not read, counted on one they may --------------------------


def _admin_field(html: str, name: str) -> str:
    """The text of a read-only field on an admin change page."""
    field = BeautifulSoup(html, "html.parser").select_one(f".field-{name} .readonly")
    assert field is not None, name
    return field.get_text(" ", strip=True)


@pytest.mark.django_db
def test_a_reviewer_is_not_told_of_turns_withheld_from_them(client, member, scripted):  # type: ignore[no-untyped-def]
    """A member asks about the vault, leaves it, and goes on in the same conversation: the
    later turn holds nothing of the vault (its history left the withheld turn out), so a
    reviewer outside vault reads it. Its "Turn" and "Searched for" must not say that an
    earlier turn, one they may not read, exists: that the member asked something answered
    from a restricted document is itself what the withheld answer hides."""
    scripted.script = ["The Nightjar zeppelin launches from ", "hangar nine [1]."]
    first = ask(user=member, question=QUESTION)
    assert isinstance(first, pipeline.DoneEvent) and SECRET in first.answer.text
    _leave_vault(member)
    scripted.script = ["A lambda is a small anonymous function [1]."]
    second = ask(
        user=member,
        question="What is a lambda expression?",
        conversation_id=first.answer.conversation_id,
    )
    assert isinstance(second, pipeline.DoneEvent) and second.answer.turn == 2  # not vacuous

    client.force_login(staff_reviewer("outsider"))
    html = client.get(f"/admin/answers/answer/{second.answer.answer_id}/change/").content
    page = html.decode()
    assert "A lambda is a small anonymous function" in page  # readable to them
    assert _admin_field(page, "turn") == "1"
    assert _admin_field(page, "searched_for") == "the question as asked"
    # A reviewer who may read both turns sees them as they are.
    client.force_login(staff_reviewer("insider", groups=("vault",)))
    page = client.get(f"/admin/answers/answer/{second.answer.answer_id}/change/").content.decode()
    assert _admin_field(page, "turn") == "2"
    assert _admin_field(page, "searched_for") == "the question as asked"


# --- a restricted passage edited out, then the document opened ---------------------------


@pytest.mark.django_db
def test_a_restricted_passage_edited_out_before_its_document_was_opened_stays_withheld(
    client, member, scripted
):  # type: ignore[no-untyped-def]
    """A vault memo is redacted (the secret edited out) and then opened to everyone. The
    reviewers who may view it now may view the redacted version, never the passage a
    member's answer was written from when only vault could read it: that answer, which
    quotes the passage and keeps it as its evidence (ADR 0022), stays out of their admin.
    Its asker read that passage when it was written, and still reads their answer."""
    scripted.script = ["The Nightjar zeppelin launches from ", "hangar nine [1]."]
    done = ask(user=member, question=QUESTION)
    assert isinstance(done, pipeline.DoneEvent) and SECRET in done.answer.text
    answer_id = done.answer.answer_id
    memo = Document.objects.get(body__contains=SECRET)
    assert RetrievedSource.objects.filter(
        question__answer=answer_id, document=memo, prompt_number__isnull=False
    ).exists()  # not vacuous: written from the memo's passage that holds the secret

    memo.body = memo.body.replace(SECRET, "a hangar")
    memo.access = Document.Access.EVERYONE
    services.document_save(document=memo, chunk_size=1200, groups=[])
    # The other vault document, unchanged, is opened too: nothing else withholds it.
    for other in Document.objects.filter(title__in=VAULT_TITLES).exclude(pk=memo.pk):
        other.access = Document.Access.EVERYONE
        services.document_save(document=other, chunk_size=1200, groups=[])

    outsider = staff_reviewer("outsider")
    client.force_login(outsider)
    listing = client.get("/admin/answers/answer/", {"q": SECRET}).content.decode()
    assert f"/admin/answers/answer/{answer_id}/change/" not in listing
    page = client.get(f"/admin/answers/answer/{answer_id}/change/", follow=True)
    assert SECRET not in page.content.decode()
    services.feedback_record(  # a gap, as the report shows it to a reviewer who may read it
        answer=Answer.objects.get(pk=answer_id), user=member, rating="down", comment=""
    )
    gaps = client.get("/admin/answers/answer/content-gaps/", {"format": "csv"})
    assert gaps.status_code == 200 and QUESTION not in gaps.content.decode()
    # An auditor reviews it; its asker still reads it (they read the passage then).
    client.force_login(staff_reviewer("auditor", review_all=True))
    page = client.get(f"/admin/answers/answer/{answer_id}/change/").content.decode()
    assert SECRET in page
    gaps = client.get("/admin/answers/answer/content-gaps/", {"format": "csv"})
    assert QUESTION in gaps.content.decode()
    body = client.get(f"/api/answers/{answer_id}", headers=bearer_headers(member, name="t")).json()
    assert body["withheld"] is False and SECRET in body["text"]
