"""From a question to numbered sources: search, threshold, rank, rerank, caps, access, numbering.

The order is fixed (ADR 0002): score threshold (the best chunk must reach it; the others
stay down to ``SOURCE_SCORE_RATIO`` of its score, ADR 0033), document ranking
(``answers.ranking``, ADR 0020), optional rerank, at most
``MAX_CHUNKS_PER_DOCUMENT`` chunks per document, then the asking user's access, then
near-duplicates of a higher-ranked kept document (ADR 0032), then at most ``MAX_SOURCES``
documents. Access comes before the source limit so that documents a user may not view never
take that user's places, and before near-duplicates so that what a user sees never depends
on documents they may not view. Every candidate keeps its fate for the record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .conf import answers_settings
from .duplicates import signature_values, values_similarity
from .models import RetrievedSource
from .ranking import candidates_ranked
from .registry import get_reranker, get_search_backend
from .search.base import SearchHit, search_takes_scope

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import Document
from .types import Candidate, NumberedSource, SourceSelection

logger = logging.getLogger(__name__)
Dropped = RetrievedSource.Dropped


def search_hits(
    *,
    question: str,
    previous_question: str | None,
    documents: QuerySet[Document] | None,
    standalone: str = "",
) -> list[SearchHit]:
    """Search the asker's ``documents`` for the question; a follow-up is also searched
    together with the turn before.

    Elliptical follow-ups ("and how does it differ from X?") name only part of their
    subject; the previous question supplies the rest. Each chunk keeps its best score.
    ``standalone`` is the follow-up rewritten to stand alone (``REWRITE_FOLLOWUPS``): it
    is searched instead of both.
    The search and its statistics are scoped to ``documents`` (ADR 0009); None searches
    every document (an asker who may view them all). A backend that cannot scope (system
    check answers.E013, silenced) searches everything, and ``select_sources`` still drops
    what the asker may not view.
    """
    backend = get_search_backend()
    limit = int(answers_settings.CANDIDATES)
    scope = {"documents": documents} if search_takes_scope(backend) else {}
    if standalone:
        question, previous_question = standalone, None
    best: dict[int, float] = {
        hit.chunk_id: hit.score for hit in backend.search(question, limit=limit, **scope)
    }
    if previous_question:
        for hit in backend.search(f"{previous_question} {question}", limit=limit, **scope):
            if hit.score > best.get(hit.chunk_id, -1.0):
                best[hit.chunk_id] = hit.score
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [SearchHit(chunk_id, score) for chunk_id, score in ranked]


def select_sources(
    candidates: Sequence[Candidate],
    *,
    question: str,
    visible_document_ids: Callable[[Iterable[int]], set[int]],
) -> SourceSelection:
    """Decide every candidate's fate, and number the survivors [1..N] by best rank.

    The three steps below in one call; the pipeline runs the rerank apart, since it may
    wait on the network (``rerank``)."""
    contenders = sources_contending(candidates, question=question)
    rerank_error = rerank(contenders, question=question)
    sources = sources_numbered(contenders, visible_document_ids=visible_document_ids)
    return SourceSelection(sources=sources, rerank_error=rerank_error)


def sources_contending(candidates: Sequence[Candidate], *, question: str) -> list[Candidate]:
    """The candidates that compete for the places, ranked; the others are marked below the
    threshold."""
    threshold = float(answers_settings.SCORE_THRESHOLD)
    ratio = float(answers_settings.SOURCE_SCORE_RATIO)

    # The threshold decides whether the question is answered: its best chunk must reach
    # it. Which chunks then compete for the places is relative to that best (ADR 0033): a
    # page the ranking below prefers (its title, its coverage) often scores just under the
    # threshold, and an absolute cut would drop it before the ranking sees it. Never
    # stricter than the threshold, so a ratio of 1.0 is the old rule.
    # The best chunk the asker may view: one they may not (a backend that cannot scope, a
    # document restricted since the search) is dropped later, and must not move the bar
    # for the others meanwhile (ADR 0009). Unknown visibility (tools) counts.
    best = max((c.score for c in candidates if c.document_visible is not False), default=0.0)
    floor = min(threshold, ratio * best) if best >= threshold else threshold
    alive: list[Candidate] = []
    for candidate in candidates:
        if candidate.score < floor:
            candidate.dropped_reason = Dropped.BELOW_THRESHOLD
        else:
            alive.append(candidate)
    return candidates_ranked(
        alive,
        question=question,
        title_weight=float(answers_settings.RANK_TITLE_WEIGHT),
        size_prior=float(answers_settings.RANK_SIZE_PRIOR),
        api_title_penalty=float(answers_settings.RANK_API_TITLE_PENALTY),
    )


def reranks() -> bool:
    """Whether a reranker is configured (``rerank`` then has work to do)."""
    return get_reranker() is not None


def rerank(contenders: list[Candidate], *, question: str) -> str:
    """Reorder ``contenders`` (in place) by the reranker's scores, if one is configured;
    returns why it failed, or "". Reads no database: an HTTP reranker waits on the network
    for up to ``RERANK_TIMEOUT``, so the pipeline runs this off the thread database work
    shares (ADR 0017, "Later")."""
    reranker = get_reranker()
    if reranker is None or not contenders:
        return ""
    try:
        scores = [float(score) for score in reranker.rerank(question, contenders)]
        if len(scores) != len(contenders):
            raise ValueError(f"{len(scores)} scores for {len(contenders)} candidates")
    except Exception as exc:
        # A reranker is an optional refinement: when it fails the answer goes on with
        # the ranked search order, and the admin shows why (no rerank scores either).
        logger.warning("Reranker failed; keeping the search order", exc_info=True)
        return f"{type(exc).__name__}: {exc}"[:500]
    for candidate, score in zip(contenders, scores, strict=True):
        candidate.rerank_score = score
    contenders.sort(key=lambda c: (-(c.rerank_score or 0.0), c.rank))
    return ""


def sources_numbered(
    contenders: Sequence[Candidate],
    *,
    visible_document_ids: Callable[[Iterable[int]], set[int]],
) -> list[NumberedSource]:
    """The contenders' fates in their (reranked) order: the per-document cap, access,
    near-duplicates, the source limit; the survivors numbered [1..N]."""
    per_document = int(answers_settings.MAX_CHUNKS_PER_DOCUMENT)
    max_sources = int(answers_settings.MAX_SOURCES)
    near_duplicate = float(answers_settings.NEAR_DUPLICATE_SIMILARITY)

    kept_per_document: dict[int, int] = {}
    capped: list[Candidate] = []
    for candidate in contenders:
        kept = kept_per_document.get(candidate.document_id, 0)
        if kept >= per_document:
            candidate.dropped_reason = Dropped.DOCUMENT_CAP
            continue
        kept_per_document[candidate.document_id] = kept + 1
        capped.append(candidate)

    try:
        visible = visible_document_ids({c.document_id for c in capped})
    except Exception:
        # Fail closed: a broken permission check must never mean "show everything".
        logger.exception("Access check failed; no sources will be used")
        visible = set()

    numbers: dict[int, int] = {}
    grouped: dict[int, list[Candidate]] = {}
    duplicates: set[int] = set()
    # Each numbered document's signature values, unpacked once: every later candidate
    # with a document of its own is compared with all of them.
    kept_values: list[frozenset[int]] = []
    for candidate in capped:
        if candidate.document_id not in visible:
            candidate.dropped_reason = Dropped.NO_ACCESS
            continue
        if candidate.document_id in duplicates:
            candidate.dropped_reason = Dropped.NEAR_DUPLICATE
            continue
        number = numbers.get(candidate.document_id)
        if number is None:
            # Compared only with the documents already numbered (at most MAX_SOURCES), by
            # their stored signatures: a few comparisons per candidate, whatever the corpus.
            values = signature_values(candidate.document_signature)
            if near_duplicate > 0 and _near_duplicate(
                values, kept=kept_values, similarity=near_duplicate
            ):
                duplicates.add(candidate.document_id)
                candidate.dropped_reason = Dropped.NEAR_DUPLICATE
                continue
            if len(numbers) >= max_sources:
                candidate.dropped_reason = Dropped.SOURCE_LIMIT
                continue
            number = numbers[candidate.document_id] = len(numbers) + 1
            grouped[number] = []
            kept_values.append(values)
        candidate.prompt_number = number
        grouped[number].append(candidate)

    sources = [
        NumberedSource(
            number=number,
            document_id=members[0].document_id,
            title=members[0].title,
            url=members[0].url,
            candidates=tuple(members),
        )
        for number, members in grouped.items()
    ]
    return sources


def _near_duplicate(
    values: frozenset[int], *, kept: Iterable[frozenset[int]], similarity: float
) -> bool:
    """Whether the document with these signature values is a near-duplicate of a kept
    source's document (no values: no signature, never a duplicate)."""
    return bool(values) and any(values_similarity(values, other) >= similarity for other in kept)
