"""How well each citation's passage supports the sentence that cites it (ADR 0023).

Offline and lexical, as a proxy for entailment: a cited sentence's *claim* (its words up
to the marker, markers out) is supported by a passage in the share of its content words
found there, stemmed as the search stems them. Numbers and negations weigh double: a
claim that changes a figure or drops a "not" is the unsupported kind a reader trusts
most. A claim with no content word ("this is how it works") is fully supported.

Markers are the citation rules' own (``citations.iter_markers``, the renderer's parser),
so a marker in code is no citation here either. One pass over the text; each claim is
read once. Pure: no Django.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .citations import iter_markers
from .search.base import STOPWORDS
from .search.stemming import stem_text

# Below this a citation counts as unsupported (the admin highlights it; ALCE precision).
SUPPORTED = 0.5
NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "cannot", "neither", "nor"})
# Words that carry no claim: the search's stop words and the function words it keeps
# because they are keywords in code ("is", "in", "for", "with").
FUNCTION_WORDS = STOPWORDS | frozenset(
    "is in for with and or as from on at by if so but its too each both only".split()  # noqa: SIM905
)
_WORD = re.compile(r"[^\W_]+")
# Where a claim starts: after a sentence's end or a line break (Markdown blocks).
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")


@dataclass(frozen=True)
class CitationSupport:
    """One citation: the claim it is attached to, the number cited, and the support."""

    sentence: int  # 0-based position of the claim among the cited claims
    claim: str
    number: int
    support: float


def _weighted_terms(text: str) -> dict[str, float]:
    terms: dict[str, float] = {}
    for word in _WORD.findall(text.lower()):
        if word in NEGATIONS or word.isdigit():
            terms[word] = 2.0
        elif word not in FUNCTION_WORDS and len(word) > 1:
            for stem in stem_text(word).split():
                terms.setdefault(stem, 1.0)
    return terms


# The passages of the documents asked about most come back answer after answer: their
# terms are worked out once while they do (keyed by the text alone; the result is immutable).
@lru_cache(maxsize=2048)
def passage_terms(text: str) -> frozenset[str]:
    words = _WORD.findall(text.lower())
    return frozenset(stem_text(" ".join(words)).split()) | {w for w in words if w.isdigit()}


def _terms_by_number(passages: Mapping[int, Sequence[str]]) -> dict[int, frozenset[str]]:
    return {number: passage_terms(" ".join(texts)) for number, texts in passages.items()}


def claim_support(claim: str, passage_terms: frozenset[str]) -> float:
    """The weighted share of ``claim``'s content words that ``passage_terms`` hold."""
    terms = _weighted_terms(claim)
    total = sum(terms.values())
    if not total:
        return 1.0
    found = sum(weight for term, weight in terms.items() if term in passage_terms)
    return round(found / total, 4)


def cited_claims(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Each run of adjacent markers with the claim before it: the text back to the last
    sentence end (or line break, or the previous run of markers)."""
    claims: list[tuple[str, tuple[int, ...]]] = []
    previous_end = 0
    cluster_start = cluster_end = -1
    numbers: list[int] = []
    markers = list(iter_markers(text))
    for index, marker in enumerate(markers):
        if cluster_start < 0:
            cluster_start, numbers = marker.start, []
        numbers.extend(marker.numbers)
        cluster_end = marker.end
        following = markers[index + 1] if index + 1 < len(markers) else None
        if following is not None and not text[cluster_end : following.start].strip():
            continue  # "[1][3]" or "[1] [3]": one citation of both
        before = text[previous_end:cluster_start].rstrip()
        # "... a claim. [1]": the marker cites the sentence it follows.
        body = before[:-1] if before.endswith((".", "!", "?")) else before
        starts = [m.end() for m in _SENTENCE_END.finditer(body)]
        claim = body[starts[-1] :] if starts else body
        claims.append((claim.strip(), tuple(dict.fromkeys(numbers))))
        previous_end, cluster_start = cluster_end, -1
    return claims


def citations_support(text: str, passages: Mapping[int, Sequence[str]]) -> list[CitationSupport]:
    """The support of every citation in ``text`` (final numbers) by ``passages`` (each
    number's passage texts). A number without passages scores 0."""
    terms = _terms_by_number(passages)
    results = []
    for position, (claim, numbers) in enumerate(cited_claims(text)):
        for number in numbers:
            support = claim_support(claim, terms.get(number, frozenset()))
            results.append(CitationSupport(position, claim, number, support))
    return results


def claims_supported(text: str, passages: Mapping[int, Sequence[str]]) -> list[float]:
    """Each cited claim's support by the union of the passages it cites (ALCE recall)."""
    terms = _terms_by_number(passages)
    return [
        claim_support(claim, frozenset().union(*(terms.get(n, frozenset()) for n in numbers)))
        for claim, numbers in cited_claims(text)
    ]


@dataclass(frozen=True)
class CitationQuality:
    """ALCE's citation recall and precision counts for one answer (Gao et al., 2023), with
    this module's support standing in for their entailment model."""

    claims: int
    supported_claims: int  # the union of a claim's citations supports it
    citations: int
    relevant: int  # supports the claim alone, or the others cannot without it


def citation_quality(text: str, passages: Mapping[int, Sequence[str]]) -> CitationQuality:
    terms = _terms_by_number(passages)

    def supported(claim: str, numbers: Sequence[int]) -> bool:
        union = frozenset().union(*(terms.get(n, frozenset()) for n in numbers))
        return bool(numbers) and claim_support(claim, union) >= SUPPORTED

    claims = cited_claims(text)
    supported_claims = citations = relevant = 0
    for claim, numbers in claims:
        whole = supported(claim, numbers)
        supported_claims += whole
        for number in numbers:
            citations += 1
            others = [n for n in numbers if n != number]
            relevant += supported(claim, [number]) or (whole and not supported(claim, others))
    return CitationQuality(len(claims), supported_claims, citations, relevant)
