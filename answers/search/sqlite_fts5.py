"""Embedded search on SQLite FTS5 (BM25 with Porter stemming).

The index ``answers_chunk_fts`` (document title and chunk text, the title weighted 2:1)
is created by a migration and kept current by triggers, so any write to chunks or
document titles is searchable at once.

Normalization: FTS5's BM25 adds, for each query term, ``idf * f*(k1+1) / (f + K)``; the
second factor tends to ``k1+1`` as the term frequency grows, so ``(k1+1) * sum(idf)`` over
the query's terms bounds the raw score. The normalized score is the raw score divided by
that bound, using FTS5's own idf (terms the corpus lacks count at the highest idf). It
reads as "the share of the question's evidence this chunk carries": a question whose
distinctive words the corpus never uses cannot score high, on any corpus.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection
from django.db.backends.utils import CursorWrapper

from . import bm25
from .base import SearchHit, query_terms

K1 = bm25.K1  # FTS5's built-in bm25() constant
FTS_TABLE = "answers_chunk_fts"
VOCAB_TABLE = "answers_chunk_fts_vocab"
_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


class SQLiteFTS5Backend:
    name = "sqlite-fts5"
    vendor = "sqlite"  # the database it needs (a system check compares it)

    def search(self, query: str, *, limit: int) -> list[SearchHit]:
        with connection.cursor() as cursor:
            planned = self.plan(cursor, query)
            if planned is None:
                return []
            expression, bound = planned
            cursor.execute(
                f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s "  # noqa: S608
                "ORDER BY rank LIMIT %s",
                [expression, limit],
            )
            hits = cursor.fetchall()
        return [SearchHit(chunk_id=row[0], score=min(1.0, -row[1] / bound)) for row in hits]

    def plan(self, cursor: CursorWrapper, query: str) -> tuple[str, float] | None:
        """The MATCH expression for ``query`` and the bound its scores are divided by."""
        terms = query_terms(query)
        stems = self._stems(cursor, terms) if terms else {}
        if not stems:
            return None
        doc_counts, rows = self._doc_counts(cursor, set(stems.values()))
        bound = self._score_bound(stems.values(), doc_counts, rows)
        # A term in half the chunks or more has an idf FTS5 clamps to ~0: it cannot move a
        # score, but matching it makes FTS5 rank nearly every row. Leave it out.
        useful = [t for t, stem in stems.items() if doc_counts.get(stem, 0) < rows / 2]
        return " OR ".join(_quote(term) for term in useful or stems), bound

    def _stems(self, cursor: CursorWrapper, terms: list[str]) -> dict[str, str]:
        """Each query term with its stem as the index stores it (FTS5's own tokenizer)."""
        # A per-connection scratch index runs the exact tokenizer the corpus used.
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.answers_query_terms "
            f"USING fts5(q, tokenize='{_TOKENIZER}')"
        )
        cursor.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.answers_query_terms_vocab "
            "USING fts5vocab(temp, answers_query_terms, instance)"
        )
        cursor.execute("DELETE FROM temp.answers_query_terms")
        # One row per term, keyed by its position, so each stem is known to be its term's.
        cursor.executemany(
            "INSERT INTO temp.answers_query_terms(rowid, q) VALUES (%s, %s)",
            list(enumerate(terms)),
        )
        cursor.execute("SELECT doc, term FROM temp.answers_query_terms_vocab ORDER BY doc, offset")
        stems: dict[str, str] = {}
        for position, stem in cursor.fetchall():
            stems.setdefault(terms[position], stem)
        return stems

    def _doc_counts(self, cursor: CursorWrapper, stems: set[str]) -> tuple[dict[str, int], int]:
        placeholders = ", ".join(["%s"] * len(stems))
        cursor.execute(
            f"SELECT term, doc FROM {VOCAB_TABLE} WHERE term IN ({placeholders})",  # noqa: S608
            list(stems),
        )
        doc_counts = dict(cursor.fetchall())
        cursor.execute("SELECT count(*) FROM answers_chunk")
        (rows,) = cursor.fetchone()
        return doc_counts, rows

    @staticmethod
    def _score_bound(stems: Iterable[str], doc_counts: dict[str, int], rows: int) -> float:
        # FTS5's idf, clamped the same way; a stem the corpus lacks gets the highest.
        return bm25.score_bound(bm25.idf(doc_counts.get(stem, 0), rows) for stem in stems)
