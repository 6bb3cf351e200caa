from __future__ import annotations

import uuid

import pytest
from bs4 import BeautifulSoup

from answers.models import Document
from answers.presenters import snippet_of
from tests.corpus import RESTRICTED
from tests.helpers import ask

pytestmark = pytest.mark.django_db


def test_the_ask_page_needs_a_login(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_ask_page_needs_the_ask_permission(client, no_ask_user):
    client.force_login(no_ask_user)
    assert client.get("/").status_code == 403


def test_the_ask_page_has_a_labelled_question_box_and_a_live_answer_template(client, asker):
    client.force_login(asker)
    soup = BeautifulSoup(client.get("/").content, "html.parser")
    textarea = soup.find("textarea", id="question")
    assert soup.find("label", attrs={"for": "question"}) and textarea.has_attr("required")
    template = soup.find("template")
    assert "aria-live" in str(template) and 'data-answer-state="streaming"' in str(template)
    assert soup.find("script", src=True)["src"].endswith("answers/answers.js")
    assert soup.find("input", attrs={"name": "csrfmiddlewaretoken"})


def test_a_stored_answer_renders_with_the_same_panel_and_working_citation_links(
    client, asker, scripted
):
    scripted.script = ["Try handles errors [2] and also [1]."]
    done = ask(user=asker, question="How does the try statement handle exceptions?")
    client.force_login(asker)
    soup = BeautifulSoup(client.get(f"/answers/{done.answer.answer_id}/").content, "html.parser")
    panel = soup.select_one("[data-sources-panel]")
    assert panel["data-state"] == "final"
    ids = [li["id"] for li in panel.select("li.source")]
    assert ids == [f"answer-{done.answer.answer_id}-source-{n}" for n in (1, 2)]
    assert [a["href"][1:] for a in soup.select("[data-answer] a.citation")] == ids
    titles = [a.get_text() for a in panel.select(".source-title")]
    assert titles == [r.title for r in done.answer.references]


def test_someone_elses_answer_page_is_not_found(client, asker, other_asker, scripted):
    done = ask(user=asker, question="What is a lambda expression?")
    client.force_login(other_asker)
    assert client.get(f"/answers/{done.answer.answer_id}/").status_code == 404


def test_the_answer_list_shows_only_my_answers(client, asker, other_asker, scripted):
    ask(user=asker, question="What is a lambda expression?")
    ask(user=other_asker, question="What does the global statement do?")
    client.force_login(asker)
    text = client.get("/answers/").content.decode()
    assert "lambda expression" in text and "global statement" not in text


def test_a_stored_answer_rechecks_access_for_the_viewer(client, member, scripted):
    scripted.script = ["Launch plan [1]."]
    done = ask(user=member, question="Nightjar zeppelin launch hangar")
    restricted = [r for r in done.answer.references if r.title in RESTRICTED]
    assert restricted
    member.groups.clear()  # removed from the group since
    client.force_login(member)
    html = client.get(f"/answers/{done.answer.answer_id}/").content.decode()
    assert restricted[0].title not in html and "Source no longer available" in html


def test_document_page_has_chunk_anchors_and_checks_access(client, asker, member):
    client.force_login(asker)
    lam = Document.objects.get(source_key="python-docs:lambda")
    soup = BeautifulSoup(client.get(f"/documents/{lam.pk}/").content, "html.parser")
    assert soup.find(id="chunk-0")
    secret = Document.objects.get(title__in=RESTRICTED, title__startswith="Project")
    assert client.get(f"/documents/{secret.pk}/").status_code == 404
    client.force_login(member)
    assert client.get(f"/documents/{secret.pk}/").status_code == 200


def test_hostile_titles_and_urls_are_escaped_and_neutralized_in_the_panel():
    from answers.panels import FINAL, render_sources_panel
    from answers.types import Reference

    hostile = Reference(1, 1, '"><script>alert(1)</script>', "javascript:alert(1)", 0.5,
                        "<img src=x onerror=alert(2)>", "answer-1-source-1")  # fmt: skip
    html = render_sources_panel(references=[hostile], answer_id=1, state=FINAL)
    soup = BeautifulSoup(html, "html.parser")
    assert soup.find("script") is None and soup.find("img") is None
    assert soup.select_one(".source-title")["href"] == "#"


def test_each_source_links_to_its_document_in_the_corpus(client, asker, scripted):
    scripted.script = ["Lambdas [1]."]
    done = ask(user=asker, question="What is a lambda expression?")
    client.force_login(asker)
    soup = BeautifulSoup(client.get(f"/answers/{done.answer.answer_id}/").content, "html.parser")
    entry = soup.select_one("[data-sources-panel] li.source")
    reference = done.answer.references[0]
    assert entry.select_one(".source-title")["href"] == reference.url  # the original
    assert entry.select_one(".source-document")["href"] == f"/documents/{reference.document_id}/"
    # The card's first words, and the passage (Markdown, rendered) behind "Show passage".
    assert entry.select_one(".source-snippet").get_text() == snippet_of(reference.excerpt)
    assert entry.select_one("details.source-passage .excerpt")
    words = " ".join(entry.select_one(".excerpt").get_text().split())
    assert words.startswith("Lambdas lambda_expr ::=")


def test_a_source_with_its_own_url_also_links_its_copy_in_the_corpus():
    from django.template.loader import render_to_string

    from answers.types import Reference

    outside = Reference(
        index=1, document_id=7, title="Web page", url="https://example.com/a", score=0.5,
        excerpt="…", anchor="source-1",
    )  # fmt: skip
    inside = Reference(
        index=2, document_id=8, title="Handbook", url="/documents/8/#chunk-0", score=0.5,
        excerpt="…", anchor="source-2",
    )  # fmt: skip
    html = render_to_string(
        "answers/sources.html#sources-panel",
        {"references": [outside, inside], "answer_id": 1, "panel_state": "final"},
    )
    assert html.count("copy in the corpus") == 1
    assert 'href="/documents/7/"' in html


def test_a_conversation_page_is_its_owners_only(client, asker, other_asker, scripted):
    import uuid

    scripted.script = ["Lambdas [1]."]
    mine = ask(user=asker, question="What is a lambda expression?")
    theirs = ask(user=other_asker, question="What does the global statement do?")
    client.force_login(asker)
    page = client.get(f"/conversations/{mine.answer.conversation_id}/").content.decode()
    assert "What is a lambda expression?" in page
    assert f'data-conversation-id="{mine.answer.conversation_id}"' in page
    for conversation in (theirs.answer.conversation_id, uuid.uuid4()):
        assert client.get(f"/conversations/{conversation}/").status_code == 404
    listing = client.get("/answers/").content.decode()
    assert f"/conversations/{mine.answer.conversation_id}/" in listing
    assert f"/conversations/{theirs.answer.conversation_id}/" not in listing
    assert "global statement" not in listing


def test_a_conversation_rechecks_each_answers_sources_for_the_viewer(client, member, scripted):
    scripted.script = ["Launch plan [1]."]
    done = ask(user=member, question="Nightjar zeppelin launch hangar")
    restricted = [r for r in done.answer.references if r.title in RESTRICTED]
    assert restricted
    member.groups.clear()
    client.force_login(member)
    html = client.get(f"/conversations/{done.answer.conversation_id}/").content.decode()
    assert restricted[0].title not in html and "Launch plan" not in html
    assert "withheld" in html


def test_an_answer_page_says_how_it_ended_in_words_not_a_code(client, asker):
    done = ask(user=asker, question="What is the parking policy for visitors?")
    assert done.answer.status == "no_answer"
    client.force_login(asker)
    soup = BeautifulSoup(client.get(f"/answers/{done.answer.answer_id}/").content, "html.parser")
    assert soup.select_one("[data-watch-status]").get_text() == "Status: No answer"


def test_a_conversation_page_is_a_fixed_number_of_queries_whatever_its_turns(
    client, asker, scripted
):
    """Each turn's sources, evidence and access were read turn by turn (four queries a
    turn): a long conversation's page grew with it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from answers.models import Conversation

    def page_queries(conversation_id: object) -> int:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(f"/conversations/{conversation_id}/")
        assert response.status_code == 200
        return len(captured.captured_queries)

    scripted.script = ["Lambdas are small [1]."]
    short = ask(user=asker, question="What is a lambda expression?").answer.conversation_id
    long = ask(user=asker, question="What is a lambda expression?").answer.conversation_id
    for question in ("And a generator?", "And a class?", "And the global statement?"):
        scripted.script = ["It is described here [1] and here [2]."]
        ask(user=asker, question=question, conversation_id=uuid.UUID(long))
    assert Conversation.objects.get(pk=long).questions.count() == 4
    client.force_login(asker)
    page_queries(short)  # the session's first read
    html = client.get(f"/conversations/{long}/").content.decode()
    assert "And the global statement?" in html and "It is described here" in html
    assert page_queries(long) == page_queries(short)


def test_a_document_page_reads_its_chunks_not_its_whole_body_too(client, asker):
    """The page shows the document's chunks; its body (the same text again, megabytes for
    a big document) and its signature were read with it and never shown."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    document = Document.objects.get(source_key="python-docs:lambda")
    client.force_login(asker)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"/documents/{document.pk}/")
    assert response.status_code == 200
    assert 'id="chunk-0"' in response.content.decode()
    queries = [query["sql"] for query in captured.captured_queries]
    assert not any('"answers_document"."body"' in sql for sql in queries), queries
    assert not any('"answers_document"."near_signature"' in sql for sql in queries), queries
