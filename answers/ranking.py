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
- **API reference pages** (ADR 0032). Generated reference documentation has a page per
  function or class, titled by its dotted name (``pandas.Series.str.join``,
  ``scipy.io.FortranFile.close``): one short chunk that repeats a few words of a prose
  question ("join", "close") and so outranks the page that explains it. For a question
  that names no code itself, such a page loses ``api_title_penalty``.

The rank score only orders candidates; it is not a relevance score and is never shown or
thresholded: the chunk's normalized search score keeps its 0..1 scale and meaning, and the
``SCORE_THRESHOLD`` applies to it before this step. Both backends return the same chunks
and scores, so this step, which reads only them, gives both the same order.
This module is pure (no Django), like ``citations``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache

from .search.base import query_terms
from .search.stemming import stem_text
from .types import Candidate


def question_stems(question: str) -> frozenset[str]:
    """The question's content words as the index stores them (stop words out, stemmed)."""
    return frozenset(stem for term in query_terms(question) for stem in stem_text(term).split())


# A title that is one dotted name before any site suffix ("pandas.Series.str.join — pandas
# 1.5.3 documentation"), and a question that names code: a dotted or snake_case name, a call
# or a dunder.
_API_TITLE = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)+(?:\(\))?(?:\s+[—|-]\s.*)?$")
_CODE_IN_QUESTION = re.compile(r"[A-Za-z_]\w*\.[A-Za-z_]|[A-Za-z0-9]_[A-Za-z0-9]|\(\)|__")


def api_title(title: str) -> bool:
    """The title is an API reference page's: one dotted name, maybe a site suffix."""
    return bool(_API_TITLE.match(title.strip()))


def names_code(question: str) -> bool:
    """The question names code (``os.path``, ``first_name``, ``len()``, ``__init__``)."""
    return bool(_CODE_IN_QUESTION.search(question))


def title_coverage(stems: frozenset[str], title: str) -> float:
    """The share of the question's stems that the title holds (0..1)."""
    if not stems:
        return 0.0
    return len(stems & _title_stems(title)) / len(stems)


# Titles come back answer after answer (forty candidates each): stemmed once while they do.
@lru_cache(maxsize=8192)
def _title_stems(title: str) -> frozenset[str]:
    return frozenset(stem_text(title).split())


def rank_score(
    candidate: Candidate,
    *,
    stems: frozenset[str],
    title_weight: float,
    size_prior: float,
    api_title_penalty: float = 0.0,
) -> float:
    """``api_title_penalty`` is applied as given: the caller passes 0 for a question that
    names code."""
    coverage = title_coverage(stems, candidate.title) if title_weight else 0.0
    breadth = math.log(max(candidate.document_chunks, 1))
    score = candidate.score + title_weight * coverage - size_prior * breadth
    if api_title_penalty and api_title(candidate.title):
        score -= api_title_penalty
    return score


def candidates_ranked(
    candidates: Sequence[Candidate],
    *,
    question: str,
    title_weight: float,
    size_prior: float,
    api_title_penalty: float = 0.0,
) -> list[Candidate]:
    """``candidates`` best first by rank score; ties keep the search's order. Each
    candidate's ``rank_score`` is set."""
    stems = question_stems(question)
    penalty = 0.0 if names_code(question) else api_title_penalty
    for candidate in candidates:
        candidate.rank_score = rank_score(
            candidate,
            stems=stems,
            title_weight=title_weight,
            size_prior=size_prior,
            api_title_penalty=penalty,
        )
    return sorted(candidates, key=lambda c: (-(c.rank_score or 0.0), c.rank))
