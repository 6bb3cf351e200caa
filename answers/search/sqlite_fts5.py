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

Access scope (ADR 0009): FTS5's ``bm25()`` always uses whole-table statistics, so it is
used only when the asker may view every chunk. Otherwise the same formula is computed
here over the chunks in scope: N and the total length are FTS5's own totals less those of
the chunks out of scope (their sizes from FTS5's docsize table); each term's chunk count
is the term's matching rowids (FTS5 walks its doclist) that are in scope; the term
frequencies come from the ``fts5vocab`` instance table, read only for terms that some
chunk in scope holds. Every step is linear in the postings of the question's terms or in
the chunks out of scope, never in their product.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import connection
from django.db.backends.utils import CursorWrapper

from . import bm25
from .base import SearchHit, query_terms

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from ..models import Document

K1 = bm25.K1  # FTS5's built-in bm25() constant
FTS_TABLE = "answers_chunk_fts"
VOCAB_TABLE = "answers_chunk_fts_vocab"
# FTS5's shadow tables: per-row column sizes, and the table's totals (the record id 1).
DOCSIZE_TABLE = "answers_chunk_fts_docsize"
DATA_TABLE = "answers_chunk_fts_data"
INSTANCE_TABLE = "temp.answers_chunk_fts_instance"  # per connection, like the scratch index
_HEX_DIGITS = "'0123456789ABCDEF'"


def _byte(k: int) -> str:
    """SQL: byte ``k`` (1-based) of the hex string ``h``."""
    return (
        f"((instr({_HEX_DIGITS}, substr(h, {2 * k - 1}, 1)) - 1) * 16"
        f" + instr({_HEX_DIGITS}, substr(h, {2 * k}, 1)) - 1)"
    )


def _varint_sql(k: int) -> tuple[str, str]:
    """SQL: the value and the byte length of the varint at byte ``k`` of ``h`` (up to 3
    bytes: a column of up to 2,097,151 tokens, far beyond any chunk)."""
    b0, b1, b2 = _byte(k), _byte(k + 1), _byte(k + 2)
    value = (
        f"(CASE WHEN {b0} < 128 THEN {b0} WHEN {b1} < 128 THEN ({b0} - 128) * 128 + {b1}"
        f" ELSE ({b0} - 128) * 16384 + ({b1} - 128) * 128 + {b2} END)"
    )
    length = f"(CASE WHEN {b0} < 128 THEN 1 WHEN {b1} < 128 THEN 2 ELSE 3 END)"
    return value, length


def _row_tokens_sql() -> str:
    """SQL: a row's tokens (title + text) from ``h``, the hex of its FTS5 docsize blob."""
    title, title_length = _varint_sql(1)
    texts = " ".join(f"WHEN {n} THEN {_varint_sql(1 + n)[0]}" for n in (1, 2))
    return f"({title} + CASE {title_length} {texts} ELSE {_varint_sql(4)[0]} END)"


# FTS5's bm25() over the chunks in scope: per chunk, sum over the query's stems of
# idf * f*(k1+1) / (f + k1*(1 - b + b*D/avgdl)), f counting a title instance twice, D the
# chunk's tokens over both columns. Only the instances of the given stems are read.
_SCOPED_BM25_SQL = (
    "WITH q(term, idf) AS (VALUES {terms}), "  # noqa: S608 (constants; values are bound)
    "f AS MATERIALIZED ("
    "SELECT doc, term, sum(CASE col WHEN 'title' THEN %s ELSE 1.0 END) AS freq "
    f"FROM {INSTANCE_TABLE} WHERE term IN ({{stems}}) GROUP BY doc, term), "
    "r AS MATERIALIZED ("
    "SELECT f.doc AS doc, f.freq AS freq, q.idf AS idf, hex(s.sz) AS h "
    f"FROM f JOIN q ON q.term = f.term JOIN {DOCSIZE_TABLE} s ON s.id = f.doc "
    "WHERE f.doc NOT IN (SELECT value FROM json_each(%s))) "
    "SELECT doc, sum(idf * ((freq * (%s + 1.0)) / "
    f"(freq + %s * (1 - %s + %s * {_row_tokens_sql()} / %s)))) AS raw "
    "FROM r GROUP BY doc ORDER BY raw DESC, doc LIMIT %s"
)
_TOKENIZER = "porter unicode61 remove_diacritics 2"


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _varints(blob: bytes) -> list[int]:
    """The SQLite varints FTS5 stores its sizes and totals in (big-endian, 7 bits a byte,
    a 9th byte of 8 bits)."""
    values, value, length = [], 0, 0
    for byte in blob:
        length += 1
        if length == 9:
            values.append((value << 8) | byte)
            value = length = 0
        elif byte & 0x80:
            value = (value << 7) | (byte & 0x7F)
        else:
            values.append((value << 7) | byte)
            value = length = 0
    return values


def _tokens(size: bytes) -> int:
    """A row's length in tokens over all columns, as FTS5's bm25() reads it."""
    return sum(_varints(size))


class SQLiteFTS5Backend:
    name = "sqlite-fts5"
    vendor = "sqlite"  # the database it needs (a system check compares it)

    def search(
        self, query: str, *, limit: int, documents: QuerySet[Document] | None = None
    ) -> list[SearchHit]:
        with connection.cursor() as cursor:
            excluded = self._excluded(cursor, documents)
            if excluded:
                return self.search_scoped(cursor, query, limit=limit, excluded=excluded)
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

    def _excluded(
        self, cursor: CursorWrapper, documents: QuerySet[Document] | None
    ) -> dict[int, bytes]:
        """The chunks outside ``documents`` (the scope), with their FTS5 sizes."""
        if documents is None:
            return {}
        # The access rule stays in the queryset (selectors): only its SQL is used here.
        scope, params = documents.order_by().values("pk").query.sql_with_params()
        cursor.execute(
            f"SELECT c.id, s.sz FROM answers_document d "  # noqa: S608
            "JOIN answers_chunk c ON c.document_id = d.id "
            f"JOIN {DOCSIZE_TABLE} s ON s.id = c.id WHERE d.id NOT IN ({scope})",
            params,
        )
        return dict(cursor.fetchall())

    def search_scoped(
        self, cursor: CursorWrapper, query: str, *, limit: int, excluded: dict[int, bytes]
    ) -> list[SearchHit]:
        """FTS5's BM25 and bound over every chunk but ``excluded`` (module docstring)."""
        stems = self._stems(cursor, query_terms(query))
        if not stems:
            return []
        cursor.execute(f"SELECT block FROM {DATA_TABLE} WHERE id = 1")  # noqa: S608
        totals = cursor.fetchone()
        all_rows, *column_tokens = _varints(totals[0]) if totals else [0]
        rows = all_rows - len(excluded)
        tokens = sum(column_tokens) - sum(_tokens(size) for size in excluded.values())
        if rows <= 0 or tokens <= 0:
            return []
        avgdl = float(tokens) / float(rows)  # as fts5_aux.c computes it
        # Each stem's chunks in scope, matched as FTS5 matches the phrase (by its term).
        holders: dict[str, set[int]] = {}
        for term, stem in stems.items():
            if stem not in holders:
                cursor.execute(
                    f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s",  # noqa: S608
                    [_quote(term)],
                )
                holders[stem] = {rowid for (rowid,) in cursor.fetchall()} - excluded.keys()
        doc_counts = {stem: len(chunks) for stem, chunks in holders.items()}
        idfs = {stem: bm25.idf(count, rows) for stem, count in doc_counts.items()}
        bound = bm25.score_bound(idfs[stem] for stem in stems.values())
        # The same plan as FTS5's: terms in half the chunks or more are not matched.
        useful = [stem for stem in stems.values() if doc_counts[stem] < rows / 2]
        useful = useful or list(stems.values())
        # Only stems some chunk in scope holds: one held only out of scope adds nothing,
        # and reading its instances would take time that depends on what is out of scope.
        held = sorted({stem for stem in useful if doc_counts[stem]})
        if not held:
            return []
        # A stem weighs its idf once for each query term that has it (one FTS5 phrase each).
        weights = {stem: idfs[stem] * useful.count(stem) for stem in held}
        k1, b = bm25.K1, bm25.B
        cursor.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {INSTANCE_TABLE} "
            f"USING fts5vocab(main, {FTS_TABLE}, instance)"
        )
        cursor.execute(
            _SCOPED_BM25_SQL.format(
                terms=", ".join(["(%s, %s)"] * len(weights)),
                stems=", ".join(["%s"] * len(weights)),
            ),
            [
                *(value for pair in weights.items() for value in pair),
                bm25.TITLE_WEIGHT,
                *weights,
                json.dumps(sorted(excluded)),
                *(k1, k1, b, b, avgdl),
                limit,
            ],
        )
        return [
            SearchHit(chunk_id=pk, score=min(1.0, raw / bound)) for pk, raw in cursor.fetchall()
        ]
