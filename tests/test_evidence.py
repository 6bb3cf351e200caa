"""The cited passage, as it was (ADR 0022): a stored answer keeps the text it was written
from when its document is edited, re-ingested or deleted, and says how its sources
compare with the documents now (``source_status``), in the API, the page and the admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from answers import services
from answers.models import Document, Passage
from tests.corpus import ingest_text
from tests.helpers import api_get, ask

pytestmark = pytest.mark.django_db

KEY = "evidence:zorblat"
TITLE = "Zorblat flange calibration"
BODY = (
    "The zorblat flange is calibrated with a brass wrenchlet every spring. "
    "Calibrating the zorblat flange takes one hour."
)
EDITED = (
    "The zorblat flange is now calibrated with a laser gauge every autumn. "
    "Calibrating the zorblat flange takes ten minutes."
)
QUESTION = "How is the zorblat flange calibrated?"


def asked(user: Any) -> tuple[int, dict[str, Any]]:
    """An answer citing the zorblat document, and that reference as the API gave it then."""
    done = ask(user=user, question=QUESTION)
    (reference,) = [r for r in done.answer.references if r.title == TITLE]
    assert reference.source_status == "current"  # a live answer
    return done.answer.answer_id, reference.to_dict()


def stored(client: Client, user: Any, answer_id: int) -> dict[str, Any]:
    response = api_get(client, f"/api/answers/{answer_id}", user=user)
    assert response.status_code == 200, response.content
    return response.json()


def reference_of(body: dict[str, Any], number: int) -> dict[str, Any]:
    return next(r for r in body["references"] if r["index"] == number)


def test_an_edited_document_keeps_the_passage_the_answer_rested_on(
    client: Client, asker: Any, admin_client: Client
) -> None:
    ingest_text(KEY, TITLE, BODY)
    answer_id, then = asked(asker)
    ingest_text(KEY, TITLE, EDITED)  # re-ingested with other text: new chunks
    now = reference_of(stored(client, asker, answer_id), then["index"])
    assert now["excerpt"] == then["excerpt"] and "brass wrenchlet" in now["excerpt"]
    assert now["source_status"] == "changed"
    document = Document.objects.get(source_key=KEY)
    assert now["url"] == reverse("answers:document", args=[document.pk])  # no stale anchor
    client.force_login(asker)
    page = client.get(reverse("answers:answer", args=[answer_id])).content.decode()
    assert "changed since this answer" in page and "brass wrenchlet" in page
    assert "laser gauge" not in page
    admin = admin_client.get(reverse("admin:answers_answer_change", args=[answer_id]))
    assert f"{TITLE}: changed since this answer (the passage shown is as it was)" in (
        admin.content.decode()
    )


def test_rechunking_an_unchanged_passage_keeps_it_current(client: Client, asker: Any) -> None:
    ingest_text(KEY, TITLE, BODY)
    answer_id, then = asked(asker)
    # A new title re-chunks the document; the cited passage reads the same.
    ingest_text(KEY, TITLE + " (2nd edition)", BODY)
    now = reference_of(stored(client, asker, answer_id), then["index"])
    assert now["source_status"] == "current" and now["excerpt"] == then["excerpt"]
    assert now["title"] == TITLE + " (2nd edition)"


def test_a_removed_public_document_is_shown_from_its_snapshot(
    client: Client, asker: Any, admin_client: Client
) -> None:
    ingest_text(KEY, TITLE, BODY)
    answer_id, then = asked(asker)
    Document.objects.filter(source_key=KEY).delete()
    body = stored(client, asker, answer_id)
    assert body["withheld"] is False
    now = reference_of(body, then["index"])
    assert (now["title"], now["url"], now["source_status"]) == (TITLE, "", "removed")
    assert now["excerpt"] == then["excerpt"] and now["available"] is True
    client.force_login(asker)
    page = client.get(reverse("answers:answer", args=[answer_id])).content.decode()
    assert "removed since this answer" in page
    admin = admin_client.get(reverse("admin:answers_answer_change", args=[answer_id]))
    assert f"{TITLE} <em>(removed)</em>" in admin.content.decode()
    assert f"{TITLE}: removed since this answer" in admin.content.decode()
    assert admin_client.get(reverse("admin:answers_answer_changelist")).status_code == 200


def test_a_removed_restricted_document_withholds_the_answer(client: Client, member: Any) -> None:
    services.document_ingest(
        source_key=KEY,
        title=TITLE,
        body=BODY,
        group=Group.objects.get(name="vault"),
        chunk_size=1200,
    )
    answer_id, then = asked(member)
    Document.objects.filter(source_key=KEY).delete()
    body = stored(client, member, answer_id)
    # Nobody can tell now who could view it: fail closed, as for any source one may not view.
    assert body["withheld"] is True
    now = reference_of(body, then["index"])
    assert now["available"] is False and now["excerpt"] == "" and TITLE not in str(body)


def test_identical_passages_are_stored_once(asker: Any) -> None:
    ingest_text(KEY, TITLE, BODY)
    asked(asker)
    kept = Passage.objects.count()
    asked(asker)
    assert Passage.objects.count() == kept
    assert Passage.objects.filter(text__contains="brass wrenchlet").count() == 1
