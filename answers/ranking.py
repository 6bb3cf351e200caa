"""Document ranking: which candidate documents come first, from what the search returned.

The search backends rank *chunks* by BM25 (ADR 0003, 0007). Two things a chunk score
cannot see decide which *document* a staff question is about (ADR 0020):

- **The title.** A question that names a document's topic ("the with statement") is about
  that document. Words common in the corpus ("with", "return", "not") carry almost no
  BM25 weight, yet in a title they are the subject. A document earns
  ``title_weight * share of the question's terms in its title``.
- **Breadth.** A long document that surveys everything (a language reference's "Compound
  statements", a handbook's index page) holds some of every question's words and so
  often has the best chunk; the specific page is the better source. A document loses
  ``size_prior * ln(its chunks)``: nothing for a one-chunk page, about 0.12 at the default
  for sixty chunks.

The rank score only orders candidates; it is not a relevance score and is never shown or
thresholded: the chunk's normalized search score keeps its 0..1 scale and meaning, and the
``SCORE_THRESHOLD`` applies to it before this step. Both backends return the same chunks
and scores, so this step, which reads only them, gives both the same order.
This module is pure (no Django), like ``citations``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .search.base import query_terms
from .search.stemming import stem_text
from .types import Candidate


def question_stems(question: str) -> frozenset[str]:
    """The question's content words as the index stores them (stop words out, stemmed)."""
    return frozenset(stem for term in query_terms(question) for stem in stem_text(term).split())


def title_coverage(stems: frozenset[str], title: str) -> float:
    """The share of the question's stems that the title holds (0..1)."""
    if not stems:
        return 0.0
    return len(stems & set(stem_text(title).split())) / len(stems)


def rank_score(
    candidate: Candidate, *, stems: frozenset[str], title_weight: float, size_prior: float
) -> float:
    coverage = title_coverage(stems, candidate.title) if title_weight else 0.0
    breadth = math.log(max(candidate.document_chunks, 1))
    return candidate.score + title_weight * coverage - size_prior * breadth


def candidates_ranked(
    candidates: Sequence[Candidate], *, question: str, title_weight: float, size_prior: float
) -> list[Candidate]:
    """``candidates`` best first by rank score; ties keep the search's order. Each
    candidate's ``rank_score`` is set."""
    stems = question_stems(question)
    for candidate in candidates:
        candidate.rank_score = rank_score(
            candidate, stems=stems, title_weight=title_weight, size_prior=size_prior
        )
    return sorted(candidates, key=lambda c: (-(c.rank_score or 0.0), c.rank))
