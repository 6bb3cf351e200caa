"""The BM25 constants, idf and score bound shared by the search backends (ADR 0003, 0007).

They are FTS5's own (``bm25()`` in SQLite's fts5_aux.c): the SQLite backend lets FTS5 do
the per-row sum and uses these only for the bound; the PostgreSQL backend computes the
per-row sum with the same constants, so both divide the same numerator by the same bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

K1 = 1.2
B = 0.75
# A title match counts this many times a text match (FTS5's rank is bm25(2.0, 1.0)).
TITLE_WEIGHT = 2.0
# FTS5 replaces an idf <= 0 (a term in half the rows or more) by this.
MIN_IDF = 1e-6


def idf(hits: int, rows: int) -> float:
    """FTS5's idf of a term found in ``hits`` of ``rows`` rows, clamped the same way."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5)) if rows else 0.0
    return value if value > 0 else MIN_IDF


def score_bound(idfs: Iterable[float]) -> float:
    """``(k1+1) * sum(idf)``: no row can score more on these terms (ADR 0003)."""
    return max((K1 + 1) * sum(idfs), 1e-9)


def rarest_first(terms: Iterable[str], counts: Mapping[str, int]) -> list[str]:
    """``terms`` rarest first (fewest rows holding them; ties by term). The bounded top-k
    (ADR 0027) scores the chunks holding the first few (``covering``)."""
    return sorted(set(terms), key=lambda term: (counts.get(term, 0), term))


def covering(by_rarity: list[str], counts: Mapping[str, int], limit: int) -> int:
    """How many of ``by_rarity``'s first terms it takes for their rows to add up to
    ``limit`` (all of them if they never do)."""
    held = 0
    for taken, term in enumerate(by_rarity, start=1):
        held += counts.get(term, 0)
        if held >= limit:
            return taken
    return len(by_rarity)
