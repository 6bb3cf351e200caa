from __future__ import annotations

import pytest

from answers.retrieval import select_sources
from answers.types import Candidate

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
