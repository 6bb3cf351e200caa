"""Non-interference: nothing an outsider observes depends on documents they may not view.

Scores (BM25's N, average length, each term's chunk count, the bound), the order of hits,
which sources survive the threshold, ``no_answer`` and the answer text are computed over
the asker's access scope only (ADR 0009). These run on whichever database the suite runs
on (SQLite FTS5 here, PostgreSQL in CI's second run), through the JSON ask endpoint.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from answers import pipeline, selectors, services
from answers.models import Document, RetrievedSource
from answers.registry import get_search_backend
from tests.helpers import api_post, bearer, start

pytestmark = pytest.mark.django_db

MEMO_KEY = "vault:memo"
PROBES = ["lambda expression 7731", "lambda expression 7732"]


def vault_memo(secret: str) -> None:
    """The restricted memo: the same text but for one word, said many times."""
    vault, _ = Group.objects.get_or_create(name="vault")
    body = " ".join(
        [f"The lambda expression {secret} is our vault memo.", *[secret] * 40, "lambda"] * 3
    )
    services.document_ingest(
        source_key=MEMO_KEY, title=f"Vault memo {secret}", body=body, group=vault, chunk_size=1200
    )


def observed(client: Client, headers: dict[str, str], question: str) -> str:
    """The ask endpoint's JSON body as bytes, less what differs per ask (its ids)."""
    response = api_post(client, "/api/answers", {"question": question}, **headers)
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    answer_id = body.pop("answer_id")
    body.pop("conversation_id")
    text = json.dumps(body, sort_keys=True)
    return re.sub(rf"answer-{answer_id}-", "answer-N-", text)


def test_a_restricted_word_changes_nothing_an_outsider_sees(client, asker, quiet_questions):
    headers = bearer(asker)
    seen: dict[str, list[str]] = {}
    for secret in ("7731", "7732"):
        vault_memo(secret)  # re-ingesting the same key: the corpora differ only in the memo
        seen[secret] = [observed(client, headers, probe) for probe in PROBES]
    Document.objects.filter(source_key=MEMO_KEY).delete()
    seen["absent"] = [observed(client, headers, probe) for probe in PROBES]
    (first, *others) = [probe for answers in seen.values() for probe in answers]
    assert json.loads(first)["status"] == "complete"
    assert json.loads(first)["references"], first
    # Byte-identical: with the memo saying 7731, saying 7732, or not there at all, and
    # whichever of the two words is asked about.
    assert all(other == first for other in others), seen


def test_a_vault_member_gets_statistics_over_what_they_may_view(member):
    # The scope is per asker: a member's scores count the memo's chunks, an outsider's not.
    vault_memo("7731")
    backend = get_search_backend()
    member_docs = selectors.document_list_visible(user=member)
    hits = backend.search("lambda expression 7731", limit=5, documents=member_docs)
    assert Document.objects.get(chunks__pk=hits[0].chunk_id).source_key == MEMO_KEY


def test_restricted_documents_cannot_push_a_public_one_out_of_the_candidates(
    client, asker, quiet_questions, settings
):
    settings.ANSWERS = {**settings.ANSWERS, "CANDIDATES": 3}
    vault, _ = Group.objects.get_or_create(name="vault")
    services.document_ingest(
        source_key="t:okapi",
        title="Okapi care",
        body="The okapi eats leaves. Keepers weigh each okapi weekly.",
        chunk_size=1200,
    )
    for i in range(5):  # each scores above the public document for this question
        services.document_ingest(
            source_key=f"vault:okapi-{i}",
            title=f"Okapi okapi dossier {i}",
            body=" ".join(["okapi"] * 30),
            group=vault,
            chunk_size=1200,
        )
    response = api_post(client, "/api/answers", {"question": "okapi"}, user=asker)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "complete", body
    assert [r["title"] for r in body["references"]] == ["Okapi care"]


class UnscopedBackend:
    """A third-party backend written before scoping (system check answers.E013)."""

    name = "unscoped"

    def search(self, query: str, *, limit: int) -> list[Any]:
        from django.db import connection
        from django.utils.module_loading import import_string

        from answers.conf import _SEARCH_BACKENDS

        builtin = import_string(_SEARCH_BACKENDS[connection.vendor])()
        return list(builtin.search(query, limit=limit))


def test_a_backend_that_cannot_scope_still_never_shows_what_the_asker_may_not_view(
    client, asker, quiet_questions, settings
):
    # E013 refuses it at start-up; silenced, it still works, and the pipeline still drops
    # every source the asker may not view (only the scores leak, as E013 says).
    settings.ANSWERS = {**settings.ANSWERS, "SEARCH_BACKEND": f"{__name__}.UnscopedBackend"}
    question = "What is the Nightjar zeppelin launch plan?"
    response = api_post(client, "/api/answers", {"question": question}, user=asker)
    assert response.status_code == 200, response.content
    assert "Nightjar" not in json.dumps(response.json()["references"])
    assert "hangar nine" not in response.json()["text"]
    # It did return the restricted chunks; they were dropped after the search.
    dropped = RetrievedSource.objects.filter(question__answer__pk=response.json()["answer_id"])
    assert {r.dropped_reason for r in dropped if r.document.access == "groups"} == {"no_access"}


# The complement of the scope (selectors.document_list_hidden): an asker with nothing hidden
# is searched unscoped (pipeline.retrieve_sources), so "nothing hidden" must be exact.


def _access_matrix(django_user_model) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Documents open to everyone, shared with one group, with two, with none; and one user
    of each kind the rule tells apart."""
    from django.contrib.auth.models import AnonymousUser

    red, _ = Group.objects.get_or_create(name="red")
    blue, _ = Group.objects.get_or_create(name="blue")
    for key, groups in (("open", None), ("red", [red]), ("both", [red, blue]), ("none", [])):
        document = services.document_ingest(
            source_key=f"matrix:{key}", title=key, body=f"Matrix page {key}.", chunk_size=1200
        ).document
        if groups is not None:
            document.access = Document.Access.GROUPS
            document.save(update_fields=["access"])
            document.groups.set(groups)

    def user(name: str, *, groups: tuple[Group, ...] = (), **flags: bool):  # type: ignore[no-untyped-def]
        made = django_user_model.objects.create_user(username=name, password="pw", **flags)
        made.groups.set(groups)
        return made

    return {
        "anonymous": AnonymousUser(),
        "no group": user("plain"),
        "red": user("red-member", groups=(red,)),
        "red and blue": user("both-member", groups=(red, blue)),
        "inactive red": user("inactive", groups=(red,), is_active=False),
        "superuser": user("root", is_superuser=True, is_staff=True),
        "inactive superuser": user("old-root", is_superuser=True, is_active=False),
    }


def test_hidden_documents_are_exactly_those_not_visible(django_user_model):
    users = _access_matrix(django_user_model)
    everything = set(Document.objects.values_list("pk", flat=True))
    for name, user in users.items():
        visible = set(selectors.document_list_visible(user=user).values_list("pk", flat=True))
        hidden = set(selectors.document_list_hidden(user=user).values_list("pk", flat=True))
        assert visible | hidden == everything, name
        assert not visible & hidden, name
        assert selectors.document_list_hidden(user=user).exists() == bool(hidden), name
    # The rule's branches, spelled out once: who sees the group-only pages.
    titles = {
        name: set(selectors.document_list_visible(user=user).filter(title__in=["red", "none"])
                  .values_list("title", flat=True))
        for name, user in users.items()
    }  # fmt: skip
    assert titles["red"] == titles["red and blue"] == {"red"}
    assert titles["superuser"] == {"red", "none"}
    assert titles["no group"] == titles["anonymous"] == titles["inactive red"] == set()
    assert titles["inactive superuser"] == set()


@pytest.fixture
def scopes(monkeypatch) -> list[object]:  # type: ignore[no-untyped-def]
    """The ``documents=`` of every search the backend runs."""
    backend = type(get_search_backend())
    seen: list[object] = []
    real = backend.search

    def spy(self, query, *, limit, documents=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(documents)
        return real(self, query, limit=limit, documents=documents, **kwargs)

    monkeypatch.setattr(backend, "search", spy)
    return seen


def test_an_asker_who_may_view_everything_is_searched_whole_with_the_same_results(asker, scopes):
    from answers import pipeline

    Document.objects.filter(access=Document.Access.GROUPS).delete()  # nothing hidden now
    assert not selectors.document_list_hidden(user=asker).exists()
    question = "How does the try statement handle exceptions?"
    scoped = get_search_backend().search(
        question, limit=40, documents=selectors.document_list_visible(user=asker)
    )
    scopes.clear()
    retrieval = pipeline.retrieve_sources(user=asker, question=question)
    assert scopes == [None]
    assert [(c.chunk_id, c.score) for c in retrieval.candidates] == [
        (h.chunk_id, h.score) for h in scoped
    ]


def test_an_asker_with_anything_hidden_is_searched_in_scope(asker, scopes):
    from answers import pipeline

    vault_memo("7731")
    pipeline.retrieve_sources(user=asker, question="lambda expression 7731")
    assert len(scopes) == 1 and scopes[0] is not None
    assert MEMO_KEY not in {
        document.source_key
        for document in scopes[0]  # type: ignore[attr-defined]
    }


def test_a_chunk_the_asker_may_not_view_sets_no_bar_for_their_sources(
    asker, quiet_questions, settings
):
    """Which chunks compete for the places is relative to the best one (ADR 0033): the best
    the asker may view. Where a restricted chunk still reaches the pipeline (a backend that
    cannot scope, E013 silenced; a document restricted between search and check), its
    score must not raise or lower that bar for an outsider, changing which open sources
    they get, or whether they get an answer at all."""
    settings.ANSWERS = {**settings.ANSWERS, "SEARCH_BACKEND": f"{__name__}.UnscopedBackend"}
    services.document_ingest(
        source_key="t:zoo",
        title="Zoo keeping notes",
        body="Keepers feed the animals at dawn and weigh them weekly. The okapi enclosure is "
        "cleaned daily, and the giraffes share a paddock with the zebras near the path.",
        chunk_size=1200,
    )
    question = "okapi breeding programme"

    def numbered() -> list[str]:
        # The sources the outsider's `references` event lists (and the prompt holds).
        run = start(user=asker, question=question)
        assert isinstance(run, pipeline.AnswerRun)
        return [reference.title for reference in run.references()]

    without = numbered()
    assert len(without) > 1  # not vacuous: open chunks under the threshold compete
    vault, _ = Group.objects.get_or_create(name="vault")
    services.document_ingest(
        source_key="vault:okapi",
        title="Okapi dossier",
        body=" ".join(["okapi breeding programme"] * 20),
        group=vault,
        chunk_size=1200,
    )
    assert numbered() == without
