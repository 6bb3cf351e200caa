from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from answers import pipeline, services
from answers.duplicates import body_signature
from answers.models import Document
from answers.retrieval import select_sources
from answers.types import Candidate
from tests.corpus import ingest_text

pytestmark = pytest.mark.django_db  # registry reads settings only, but settings fixture needs it


def cand(rank: int, doc: int, score: float, ordinal: int = 0) -> Candidate:
    return Candidate(
        chunk_id=rank,
        document_id=doc,
        ordinal=ordinal,
        title=f"doc {doc}",
        url="",
        text=f"text {rank}",
        rank=rank,
        score=score,
    )


def everyone(ids):
    return set(ids)


def test_fates_follow_threshold_cap_access_and_limit(settings):
    settings.ANSWERS = {
        "SCORE_THRESHOLD": 0.3,
        "MAX_CHUNKS_PER_DOCUMENT": 1,
        "MAX_SOURCES": 2,
    }
    candidates = [
        cand(1, 10, 0.9),
        cand(2, 10, 0.8, ordinal=1),  # second chunk of doc 10: over the per-document cap
        cand(3, 20, 0.7),  # restricted
        cand(4, 30, 0.6),
        cand(5, 40, 0.5),  # third visible document: over the source limit
        cand(6, 50, 0.1),  # below the threshold
    ]
    sources = select_sources(
        candidates, question="q", visible_document_ids=lambda ids: set(ids) - {20}
    ).sources
    assert [(s.number, s.document_id) for s in sources] == [(1, 10), (2, 30)]
    assert [c.dropped_reason for c in candidates] == [
        "",
        "document_cap",
        "no_access",
        "",
        "source_limit",
        "below_threshold",
    ]
    assert [c.prompt_number for c in candidates] == [1, None, None, 2, None, None]


def test_restricted_documents_do_not_take_an_outsiders_places(settings):
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0, "MAX_SOURCES": 2}
    candidates = [cand(1, 1, 0.9), cand(2, 2, 0.8), cand(3, 3, 0.7), cand(4, 4, 0.6)]
    sources = select_sources(
        candidates, question="q", visible_document_ids=lambda ids: {3, 4}
    ).sources
    assert [s.document_id for s in sources] == [3, 4]


def test_chunks_of_one_document_share_its_number(settings):
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0, "MAX_CHUNKS_PER_DOCUMENT": 2}
    candidates = [cand(1, 1, 0.9, 4), cand(2, 2, 0.8), cand(3, 1, 0.7, 1)]
    sources = select_sources(candidates, question="q", visible_document_ids=everyone).sources
    assert [c.prompt_number for c in candidates] == [1, 2, 1]
    assert sources[0].as_prompt_source().passages == ("text 3", "text 1")  # document order


def test_a_reranker_reorders_before_the_caps(settings):
    settings.ANSWERS = {
        "SCORE_THRESHOLD": 0.0,
        "MAX_SOURCES": 1,
        "RERANKER": "answers.rerankers.TermOverlapReranker",
    }
    candidates = [cand(1, 1, 0.9), cand(2, 2, 0.5)]
    candidates[1].text = "zeppelin hangar"
    selection = select_sources(
        candidates, question="zeppelin hangar", visible_document_ids=everyone
    )
    assert [s.document_id for s in selection.sources] == [2] and selection.rerank_error == ""
    assert candidates[1].rerank_score == 1.0 and candidates[0].dropped_reason == "source_limit"


def test_a_broken_access_check_fails_closed(settings):
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0}

    def broken(ids):
        raise RuntimeError("down")

    candidates = [cand(1, 1, 0.9)]
    assert select_sources(candidates, question="q", visible_document_ids=broken).sources == []
    assert candidates[0].dropped_reason == "no_access"


# Near-duplicates (ADR 0032)


def _signed(rank: int, doc: int, score: float, body: str) -> Candidate:
    candidate = cand(rank, doc, score)
    candidate.document_signature = body_signature(body)
    return candidate


PAGE = " ".join(f"word{i}" for i in range(300))


def test_a_near_duplicate_of_a_kept_source_is_dropped_with_all_its_chunks(settings):
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0, "MAX_SOURCES": 3}
    candidates = [
        _signed(1, 1, 0.9, PAGE),
        _signed(2, 2, 0.8, PAGE + " footer"),  # the same page from another folder
        _signed(3, 3, 0.7, "something else entirely, another page"),
        _signed(4, 2, 0.6, PAGE + " footer"),  # its second chunk
        _signed(5, 4, 0.5, "a fourth page of other words"),
    ]
    sources = select_sources(candidates, question="q", visible_document_ids=everyone).sources
    assert [s.document_id for s in sources] == [1, 3, 4]  # the duplicate took no place
    assert [c.dropped_reason for c in candidates] == [
        "",
        "near_duplicate",
        "",
        "near_duplicate",
        "",
    ]
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0, "MAX_SOURCES": 3, "NEAR_DUPLICATE_SIMILARITY": 0}
    again = [_signed(1, 1, 0.9, PAGE), _signed(2, 2, 0.8, PAGE)]
    sources = select_sources(again, question="q", visible_document_ids=everyone).sources
    assert [s.document_id for s in sources] == [1, 2]  # 0 turns the rule off


def test_access_comes_before_near_duplicates(settings):
    """A restricted copy ranked first never hides the public one from an outsider, even from
    a backend that cannot scope its search (the candidates then hold it)."""
    settings.ANSWERS = {"SCORE_THRESHOLD": 0.0}
    candidates = [_signed(1, 1, 0.9, PAGE), _signed(2, 2, 0.8, PAGE)]
    sources = select_sources(
        candidates, question="q", visible_document_ids=lambda ids: set(ids) - {1}
    ).sources
    assert [s.document_id for s in sources] == [2]
    assert [c.dropped_reason for c in candidates] == ["no_access", ""]


QUESTION = "How can an inner function change a variable of the function that encloses it?"


def _nonlocal_body() -> str:
    return Document.objects.get(source_key="python-docs:nonlocal").body


def test_the_same_page_from_two_folders_never_takes_two_places(asker):
    body = _nonlocal_body()
    for folder in ("mirror", "old-mirror"):
        ingest_text(f"/srv/{folder}/nonlocal.html", "The nonlocal statement", body)
    retrieval = pipeline.retrieve_sources(user=asker, question=QUESTION)
    top = [s.document_id for s in retrieval.sources[:5]]
    copies = set(Document.objects.filter(body=body).values_list("pk", flat=True))
    assert len(copies) == 3 and len(copies & set(top)) == 1
    fates = {c.document_id: c.dropped_reason for c in retrieval.candidates}
    assert sorted(fates[pk] for pk in copies) == ["", "near_duplicate", "near_duplicate"]


def test_a_restricted_near_duplicate_never_hides_the_public_page(asker, member):
    body = _nonlocal_body()
    vault = Group.objects.get(name="vault")
    # Its title matches the question better, so it ranks first for those who may view it.
    services.document_ingest(
        source_key="vault:enclosing",
        title="Change a variable of the function that encloses an inner function",
        body=body,
        group=vault,
        chunk_size=1200,
    )
    restricted = Document.objects.get(source_key="vault:enclosing").pk
    public = Document.objects.get(source_key="python-docs:nonlocal").pk
    seen = [
        s.document_id for s in pipeline.retrieve_sources(user=member, question=QUESTION).sources
    ]
    assert seen[0] == restricted and public not in seen
    seen = [s.document_id for s in pipeline.retrieve_sources(user=asker, question=QUESTION).sources]
    assert public in seen and restricted not in seen
