"""The search backend interface.

A backend returns chunk ids with a *normalized* score: 0..1, higher is better, and
comparable across corpora and query lengths, so one ``SCORE_THRESHOLD`` means the same
everywhere. How each backend normalizes is documented on the backend and in docs/scores.md;
the built-in ones (SQLite FTS5, PostgreSQL) share one formula (``bm25``, ADR 0003, 0007).

A search is scoped to the documents the asker may view (ADR 0009): the backend searches
only their chunks and computes every statistic of the score (N, the average length, each
term's chunk count, the bound) over those chunks alone, so nothing the asker sees depends
on a document they may not view.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from ..models import Document

# Words that carry no topic. Dropping them keeps scores about the question's subject. The
# list is short on purpose: words that are keywords in code ("with", "for", "is", "in",
# "not", "from", "as") stay, and BM25's idf already discounts whatever is common.
STOPWORDS = frozenset(
    """
    a an the of to do does did doing done how what why who whom which whose when where i
    me my mine myself you your yours we our us it its itself this that these those be been
    being am are was were can could should would will shall may might must please tell
    explain describe show give there their theirs them they he him his she her hers some
    any very much many also than then just about into onto upon use used using uses work
    works working get gets make makes difference differ differs different between
    """.split()  # noqa: SIM905
)
# The same split as FTS5's unicode61 tokenizer: letters and digits, everything else separates.
_TOKEN = re.compile(r"[^\W_]+")
MAX_QUERY_TERMS = 32


def query_terms(text: str) -> list[str]:
    """Distinct, lower-cased, non-stopword terms of ``text`` in order of appearance."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text.lower()):
        if token not in STOPWORDS and token not in seen:
            seen[token] = None
            if len(seen) == MAX_QUERY_TERMS:
                break
    return list(seen)


class TermCache:
    """What the database's tokenizer makes of each query term, remembered per process.

    A term's stem (FTS5) or lexeme (PostgreSQL) depends only on the term and on a
    tokenizer and stemmer fixed by migrations, so asking the database once per term is
    enough. Bounded: cleared whole when full (terms seen again are cheap to redo).
    """

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._known: dict[str, str | None] = {}

    def get_many(
        self, terms: list[str], compute: Callable[[list[str]], dict[str, str]]
    ) -> dict[str, str | None]:
        """Each of ``terms`` with its token (None: the tokenizer finds none in it);
        ``compute`` is called once, with the terms not remembered, if there are any."""
        known = {term: self._known[term] for term in terms if term in self._known}
        missing = list(dict.fromkeys(term for term in terms if term not in known))
        if missing:
            found = compute(missing)
            fresh = {term: found.get(term) for term in missing}
            if len(self._known) + len(fresh) > self.size:
                self._known.clear()
            self._known.update(fresh)
            known.update(fresh)
        return known

    def clear(self) -> None:
        self._known.clear()


@dataclass(frozen=True)
class SearchHit:
    chunk_id: int
    score: float


class SearchBackend(Protocol):
    # A backend may also set ``vendor`` (a Django database vendor: "sqlite",
    # "postgresql"): the system check then refuses it on any other database.
    name: str

    def search(
        self, query: str, *, limit: int, documents: QuerySet[Document] | None = None
    ) -> list[SearchHit]:
        """The best ``limit`` chunks for ``query``, best first, scores in 0..1.

        ``documents`` is the asker's access scope (``selectors.document_list_visible``):
        only chunks of these documents may be returned, and the score's statistics must
        be computed over those chunks only, so that hits, order and scores are the same
        whatever else the index holds. ``None``: every document (tools, benchmarks).
        A backend without this keyword is refused by system check answers.E013.
        """
        ...


def search_takes_scope(backend: Any) -> bool:
    """Whether ``backend.search`` accepts the ``documents`` keyword (the access scope)."""
    try:
        parameters = inspect.signature(backend.search).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return "documents" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
