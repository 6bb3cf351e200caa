"""Rerankers reorder the candidates above the threshold; none is used by default.

A reranker is any class with ``rerank(question, candidates) -> list[float]`` returning one
score per candidate (higher is better); candidates are then sorted by that score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .search.base import query_terms


class RerankCandidate(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def title(self) -> str: ...


class Reranker(Protocol):
    def rerank(self, question: str, candidates: Sequence[RerankCandidate]) -> list[float]: ...


class TermOverlapReranker:
    """A small example reranker: the share of the question's terms found in the chunk."""

    def rerank(self, question: str, candidates: Sequence[RerankCandidate]) -> list[float]:
        terms = set(query_terms(question))
        if not terms:
            return [0.0 for _ in candidates]
        scores = []
        for candidate in candidates:
            found = set(query_terms(f"{candidate.title} {candidate.text}"))
            scores.append(len(terms & found) / len(terms))
        return scores
