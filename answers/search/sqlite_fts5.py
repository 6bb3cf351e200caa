"""Embedded search on SQLite FTS5 (BM25 with Snowball stemming, ADR 0013).

The index ``answers_chunk_fts`` (document title and chunk text, the title weighted 2:1)
is created by a migration and kept current by triggers, so any write to chunks or
document titles is searchable at once. The triggers index the stemmed text
(``stemming.stem_text``, Snowball English, migration 0007); queries are stemmed the same
way, and MATCH phrases are the stems.

Normalization: FTS5's BM25 adds, for each query term, ``idf * f*(k1+1) / (f + K)``; the
second factor tends to ``k1+1`` as the term frequency grows, so ``(k1+1) * sum(idf)`` over
the query's terms bounds the raw score. The normalized score is the raw score divided by
that bound, using FTS5's own idf (terms the corpus lacks count at the highest idf). It
reads as "the share of the question's evidence this chunk carries": a question whose
distinctive words the corpus never uses cannot score high, on any corpus.

Access scope (ADR 0009): FTS5's ``bm25()`` always uses whole-table statistics, so it is
used as it is only when the asker may view every chunk. Otherwise the same formula is
computed over the chunks in scope: N and the total length are FTS5's own totals less
those of the chunks out of scope (lengths kept per chunk by migration 0005's triggers);
each term's chunk count is its matching rowids (FTS5 walks its doclist) that are in
scope; each term's frequency in a chunk is solved from that term's whole-table
``bm25()``, then rescored with the scope's statistics (``_SCOPED_BM25_SQL``). Each step
is linear in the postings of the question's terms or in the chunks out of scope; as for
FTS5's own ranking (ADR 0027), the common terms' ``bm25()`` is computed only for the
chunks holding a rarer term when their ceilings prove the rest cannot enter the result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from . import bm25
from .base import SearchHit, TermCache, query_terms
from .stemming import stem_text

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from ..models import Document

K1 = bm25.K1  # FTS5's built-in bm25() constant
FTS_TABLE = "answers_chunk_fts"
VOCAB_TABLE = "answers_chunk_fts_vocab"
DATA_TABLE = "answers_chunk_fts_data"  # FTS5's shadow table: its totals are record 1
LENGTH_TABLE = "answers_chunk_fts_length"  # each row's tokens, from docsize (migration 0005)
# The bounded top-k tries a candidate pass only when its phrases' postings are at most this
# share of all the expression's postings (a speed choice; the result is exact either way).
CANDIDATE_SHARE = 0.35
Row = tuple[int, float]  # a chunk id and its raw BM25


@dataclass(frozen=True)
class _Plan:
    expression: str  # the MATCH expression: one phrase per useful query term
    bound: float  # (k1+1) * sum(idf) over every query term (ADR 0003)
    phrases: list[str]  # the expression's stems, in order (a stem twice: two terms)
    doc_counts: dict[str, int]  # chunks holding each stem (FTS5's vocabulary)
    rows: int  # chunks in the index (FTS5's totals)


# BM25 over the chunks in scope (ADR 0009). FTS5 gives, per chunk holding a term, the
# term's bm25() with whole-table statistics, s = idf_all * f*(k1+1) / (f + K_all) with
# K = k1*(1 - b + b*D/avgdl); D (the chunk's tokens) is kept by migration 0005. Solving
# for the term frequency f (an integer: title instances count 2, text ones 1; rounded, as
# the float error is far below 0.5 for any chunk), the term's share is recomputed with the
# scope's idf and avgdl, and summed per chunk. Parameters: per term (its MATCH phrase),
# then per term (t, idf_all, idf), the excluded chunk ids (a JSON array: one parameter,
# no scratch table to fill), avgdl_all, avgdl, limit.
_SCOPED_BM25_SQL = """
WITH m(t, doc, s) AS MATERIALIZED ({matches}),
q(t, idf_all, idf) AS (VALUES {terms}),
r AS MATERIALIZED (
    SELECT m.doc AS doc, m.s / q.idf_all AS g, q.idf AS idf, l.tokens AS d
    FROM m JOIN q ON q.t = m.t JOIN {lengths} AS l ON l.id = m.doc
    WHERE m.doc NOT IN (SELECT value FROM json_each(%s))
),
k AS (
    SELECT doc, g, idf,
           {k1} * (1 - {b} + {b} * d / %s) AS k_all,
           {k1} * (1 - {b} + {b} * d / %s) AS k
    FROM r
),
f AS (SELECT doc, idf, k, round(g * k_all / ({k1} + 1 - g)) AS freq FROM k)
SELECT doc, sum(idf * ((freq * ({k1} + 1.0)) / (freq + k))) AS raw
FROM f GROUP BY doc ORDER BY raw DESC, doc LIMIT %s
"""
_MATCH_SQL = "SELECT {t}, rowid, -bm25({fts}, {title}, 1.0) FROM {fts} WHERE {fts} MATCH %s"
# Each stem's chunks over the whole table and in scope, for every stem in one statement.
# Parameters: the excluded chunk ids (a JSON array), then per stem its MATCH phrase.
_SCOPED_COUNTS_SQL = """
SELECT t, count(*), sum(rowid NOT IN (SELECT value FROM json_each(%s)))
FROM ({matches}) GROUP BY t
"""
_ROWID_SQL = "SELECT {t} AS t, rowid FROM {fts} WHERE {fts} MATCH %s"
# The chunks out of scope with their lengths: the documents out of scope first, then their
# chunks by the document_id index: linear in the documents and in the chunks out of scope,
# never in all the chunks (joining every chunk to its document first cost 28 ms at 38k
# chunks, this 7). ``scope`` is the SQL of the asker's documents (selectors).
_EXCLUDED_SQL = (
    "SELECT c.id, l.tokens FROM answers_chunk c JOIN {lengths} l ON l.id = c.id "
    "WHERE c.document_id IN (SELECT d.id FROM answers_document d WHERE d.id NOT IN ({scope}))"
)
# What every search reads first, in one statement (one round trip on the thread all
# database work shares): rows of kind 0 are the chunks out of scope and their lengths, the
# row of kind 1 FTS5's totals (its record 1, ``_totals``). What the terms need comes next,
# in a second statement, and depends on this one: with chunks out of scope, each stem's
# counts in scope (``_SCOPED_COUNTS_SQL``, which walks the stems' doclists), else FTS5's
# vocabulary counts (``_vocabulary``, which walks them too). Both in this statement would
# walk them twice for a scoped search (+0.5 ms a search at 10k chunks; measured, undone),
# and a constant guard on either part does not stop FTS5's walk.
# Parameters: the scope's.
_STATISTICS_SQL = """
WITH x(id, tokens) AS MATERIALIZED ({excluded})
SELECT 0, id, tokens FROM x
UNION ALL SELECT 1, NULL, block FROM {data} WHERE id = 1
"""
# The bounded scoped top-k: the chunks holding a rarer stem, found without ranking; the
# other stems' bm25() then runs on those only (CROSS JOIN keeps FTS5 the outer loop).
_CANDIDATES_CTE = "cand(id) AS MATERIALIZED (SELECT rowid FROM {fts} WHERE {fts} MATCH %s),"
_CANDIDATE_MATCH_SQL = (
    "SELECT {t}, f.rowid, -bm25({fts}, {title}, 1.0) FROM {fts} AS f "
    "CROSS JOIN cand ON cand.id = f.rowid WHERE {fts} MATCH %s"
)


@dataclass(frozen=True)
class _Statistics:
    """What ``_STATISTICS_SQL`` read."""

    excluded: dict[int, int]  # the chunks out of scope, with their lengths in tokens
    totals: list[int]  # FTS5's: rows, then tokens per column


_STEMS = TermCache()  # each term through the scratch index once per process
_TOKENIZER = "unicode61 remove_diacritics 2"  # the text is stemmed already (migration 0007)


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


class SQLiteFTS5Backend:
    """FTS5's BM25, normalized (ADR 0003), scoped to the asker (ADR 0009)."""

    name = "sqlite-fts5"
    vendor = "sqlite"  # the database it needs (a system check compares it)

    def search(
        self, query: str, *, limit: int, documents: QuerySet[Document] | None = None
    ) -> list[SearchHit]:
        with connection.cursor() as cursor:
            stems = self._stems(cursor, query_terms(query))
            if not stems:
                return []
            statistics = self._statistics(cursor, documents)
            if statistics is None:
                return []  # an empty scope
            if statistics.excluded:
                return self._search_in_scope(cursor, stems, statistics, limit=limit)
            doc_counts = self._vocabulary(cursor, set(stems.values()))
            planned = self._plan_of(stems, doc_counts, statistics.totals[0])
            scored = self._top(cursor, planned, limit)
        bound = planned.bound
        return [SearchHit(chunk_id=pk, score=min(1.0, raw / bound)) for pk, raw in scored]

    def _statistics(
        self, cursor: CursorWrapper, documents: QuerySet[Document] | None
    ) -> _Statistics | None:
        """The chunks out of scope and FTS5's totals, in one statement (``_STATISTICS_SQL``);
        None when the scope is empty."""
        if documents is None:
            excluded_sql, params = "SELECT NULL, NULL WHERE 0", []
        else:
            # The access rule stays in the queryset (selectors): only its SQL is used here.
            try:
                scope, scope_params = documents.order_by().values("pk").query.sql_with_params()
            except EmptyResultSet:
                return None
            excluded_sql, params = (
                _EXCLUDED_SQL.format(lengths=LENGTH_TABLE, scope=scope),
                [*scope_params],
            )
        cursor.execute(_STATISTICS_SQL.format(excluded=excluded_sql, data=DATA_TABLE), params)
        found = _Statistics(excluded={}, totals=[0])
        for kind, key, value in cursor.fetchall():
            if kind == 0:
                found.excluded[int(key)] = int(value)
            else:
                found.totals[:] = _varints(value)
        return found

    def _search_in_scope(
        self, cursor: CursorWrapper, stems: dict[str, str], statistics: _Statistics, *, limit: int
    ) -> list[SearchHit]:
        counts = self._scoped_counts(cursor, stems, statistics.excluded)
        return self._scoped(
            cursor, stems, statistics.totals, counts, statistics.excluded, limit=limit
        )

    @staticmethod
    def _scoped_counts(
        cursor: CursorWrapper, stems: dict[str, str], excluded: dict[int, int]
    ) -> dict[str, tuple[int, int]]:
        """Each distinct stem's chunks over the whole table and in scope, matched as FTS5
        matches the phrase (by its term), for every stem in one statement."""
        distinct = list(dict.fromkeys(stems.values()))
        cursor.execute(
            _SCOPED_COUNTS_SQL.format(
                matches=" UNION ALL ".join(
                    _ROWID_SQL.format(t=t, fts=FTS_TABLE) for t in range(len(distinct))
                )
            ),
            [json.dumps(list(excluded)), *(_quote(stem) for stem in distinct)],
        )
        counts = dict.fromkeys(distinct, (0, 0))
        for t, matched, in_scope in cursor.fetchall():
            counts[distinct[t]] = (int(matched), int(in_scope))
        return counts

    def search_exhaustive(self, query: str, *, limit: int) -> list[SearchHit]:
        """The same search as ``search(documents=None)`` scoring every match (FTS5's own
        ``ORDER BY rank``): the reference the bounded top-k is tested and benched against."""
        with connection.cursor() as cursor:
            planned = self._plan(cursor, query)
            if planned is None:
                return []
            scored = self._rank_all(cursor, planned.expression, limit)
        bound = planned.bound
        return [SearchHit(chunk_id=pk, score=min(1.0, raw / bound)) for pk, raw in scored]

    def _rank_all(self, cursor: CursorWrapper, expression: str, limit: int) -> list[Row]:
        cursor.execute(
            f"SELECT rowid, -rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s "  # noqa: S608
            "ORDER BY rank, rowid LIMIT %s",
            [expression, limit],
        )
        return [(int(pk), float(raw)) for pk, raw in cursor.fetchall()]

    def _top(self, cursor: CursorWrapper, planned: _Plan, limit: int) -> list[Row]:
        """The best ``limit`` chunks for the planned phrases, as ``_rank_all`` orders them,
        without ranking every match (MaxScore, ADR 0027).

        A phrase adds strictly less than ``(k1+1) * idf`` to any chunk, so a chunk holding
        only common phrases scores below the sum of their ceilings. The chunks holding the
        rarest phrases are found from their doclists (no ranking), and only they are
        scored, with the whole expression (so exactly as FTS5 ranks them); when the
        ``limit``-th of them is at or above the common phrases' ceiling, no other chunk can
        enter the result. Otherwise the commonest phrases whose ceiling stays under that
        floor are still skipped in a second pass (the floor can only rise: exact); when
        none can be, every match is ranked.
        """
        counts = planned.doc_counts
        weight = {stem: planned.phrases.count(stem) for stem in planned.phrases}
        by_rarity = bm25.rarest_first(weight, counts)
        ceilings = {
            stem: weight[stem] * (bm25.K1 + 1) * bm25.idf(counts.get(stem, 0), planned.rows)
            for stem in by_rarity
        }
        first = bm25.covering(by_rarity, counts, limit)
        total = sum(counts.get(stem, 0) for stem in by_rarity)
        floor = 0.0
        for _ in range(2):
            skipped = by_rarity[first:]
            held = sum(counts.get(stem, 0) for stem in by_rarity[:first])
            # Ranking candidates costs about as much per chunk as ranking every match, and
            # a pass that fails is wasted: only try when it scores a fraction of them.
            if not skipped or held > total * CANDIDATE_SHARE:
                break
            scored = self._rank_candidates(cursor, planned.expression, by_rarity[:first], limit)
            floor = scored[-1][1] if len(scored) == limit else 0.0
            if sum(ceilings[stem] for stem in skipped) <= floor:
                return scored
            # Skip only the commonest phrases whose ceiling stays under the floor found.
            while (
                first < len(by_rarity) and sum(ceilings[stem] for stem in by_rarity[first:]) > floor
            ):
                first += 1
        return self._rank_all(cursor, planned.expression, limit)

    def _rank_candidates(
        self, cursor: CursorWrapper, expression: str, rare: list[str], limit: int
    ) -> list[Row]:
        """The best ``limit`` chunks holding any of ``rare``, ranked on ``expression``, in
        one statement (the candidates in a materialized CTE, not a scratch table to create,
        empty and fill: three statements fewer per pass)."""
        # CROSS JOIN keeps FTS5 the outer loop: it walks the doclists once (no ranking) and
        # bm25() runs for the candidates only; as an inner loop FTS5 would run the whole
        # query once per candidate.
        candidates = _CANDIDATES_CTE.format(fts=FTS_TABLE).rstrip(",")
        sql = (
            f"WITH {candidates} SELECT f.rowid, "  # noqa: S608 (constants)
            f"-bm25({FTS_TABLE}, {float(bm25.TITLE_WEIGHT)}, 1.0) AS raw "
            f"FROM {FTS_TABLE} AS f CROSS JOIN cand ON cand.id = f.rowid "
            f"WHERE {FTS_TABLE} MATCH %s ORDER BY raw DESC, f.rowid LIMIT %s"
        )
        cursor.execute(sql, [" OR ".join(_quote(stem) for stem in rare), expression, limit])
        return [(int(pk), float(raw)) for pk, raw in cursor.fetchall()]

    def maintain(self) -> None:
        """After a bulk write: refresh the query planner's statistics where they are stale."""
        # In a transaction: BEGIN IMMEDIATE waits for the write lock (the busy timeout), where
        # an autocommit PRAGMA that reads and then writes fails at once ("database is locked")
        # if another process wrote in between (a concurrent ingest's batch).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("PRAGMA optimize")

    def plan(self, cursor: CursorWrapper, query: str) -> tuple[str, float] | None:
        """The MATCH expression for ``query`` and the bound its scores are divided by."""
        planned = self._plan(cursor, query)
        return None if planned is None else (planned.expression, planned.bound)

    def _plan(self, cursor: CursorWrapper, query: str) -> _Plan | None:
        terms = query_terms(query)
        stems = self._stems(cursor, terms) if terms else {}
        if not stems:
            return None
        doc_counts, rows = self._doc_counts(cursor, set(stems.values()))
        return self._plan_of(stems, doc_counts, rows)

    def _plan_of(self, stems: dict[str, str], doc_counts: dict[str, int], rows: int) -> _Plan:
        bound = self._score_bound(stems.values(), doc_counts, rows)
        # A term in half the chunks or more has an idf FTS5 clamps to ~0: it cannot move a
        # score, but matching it makes FTS5 rank nearly every row. Leave it out.
        useful = [t for t, stem in stems.items() if doc_counts.get(stem, 0) < rows / 2]
        phrases = [stems[term] for term in useful or stems]
        expression = " OR ".join(_quote(stem) for stem in phrases)
        return _Plan(expression, bound, phrases, doc_counts, rows)

    def _stems(self, cursor: CursorWrapper, terms: list[str]) -> dict[str, str]:
        """Each query term with its stem as the index stores it (stemmed as the triggers
        stem, then split by FTS5's own tokenizer); a term FTS5 finds no token in is left out."""
        known = _STEMS.get_many(terms, lambda missing: self._tokenize(cursor, missing))
        return {term: stem for term in terms if (stem := known[term]) is not None}

    @staticmethod
    def _tokenize(cursor: CursorWrapper, terms: list[str]) -> dict[str, str]:
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
            [(position, stem_text(term)) for position, term in enumerate(terms)],
        )
        cursor.execute("SELECT doc, term FROM temp.answers_query_terms_vocab ORDER BY doc, offset")
        stems: dict[str, str] = {}
        for position, stem in cursor.fetchall():
            stems.setdefault(terms[position], stem)
        return stems

    def _doc_counts(self, cursor: CursorWrapper, stems: set[str]) -> tuple[dict[str, int], int]:
        return self._vocabulary(cursor, stems), self._totals(cursor)[0]

    @staticmethod
    def _vocabulary(cursor: CursorWrapper, stems: set[str]) -> dict[str, int]:
        """Each stem's chunks over the whole table, from FTS5's vocabulary."""
        placeholders = ", ".join(["%s"] * len(stems))
        cursor.execute(
            f"SELECT term, doc FROM {VOCAB_TABLE} WHERE term IN ({placeholders})",  # noqa: S608
            list(stems),
        )
        return dict(cursor.fetchall())

    @staticmethod
    def _totals(cursor: CursorWrapper) -> list[int]:
        """FTS5's own totals, kept by the index itself: rows, then tokens per column (its
        record 1: read in O(1), where ``count(*)`` reads every row)."""
        cursor.execute(f"SELECT block FROM {DATA_TABLE} WHERE id = 1")  # noqa: S608
        found = cursor.fetchone()
        return _varints(found[0]) if found else [0]

    @staticmethod
    def _score_bound(stems: Iterable[str], doc_counts: dict[str, int], rows: int) -> float:
        # FTS5's idf, clamped the same way; a stem the corpus lacks gets the highest.
        return bm25.score_bound(bm25.idf(doc_counts.get(stem, 0), rows) for stem in stems)

    def search_scoped(
        self, cursor: CursorWrapper, query: str, *, limit: int, excluded: dict[int, int]
    ) -> list[SearchHit]:
        """FTS5's BM25 and bound over every chunk but ``excluded`` (module docstring)."""
        stems = self._stems(cursor, query_terms(query))
        if not stems:
            return []
        counts = self._scoped_counts(cursor, stems, excluded)
        return self._scoped(cursor, stems, self._totals(cursor), counts, excluded, limit=limit)

    def _scoped(
        self,
        cursor: CursorWrapper,
        stems: dict[str, str],
        totals: list[int],
        counts: dict[str, tuple[int, int]],
        excluded: dict[int, int],
        *,
        limit: int,
    ) -> list[SearchHit]:
        """The scoped search from its statistics: ``counts`` holds each distinct stem's
        chunks over the whole table and in scope."""
        all_rows, *column_tokens = totals
        rows = all_rows - len(excluded)
        tokens = sum(column_tokens) - sum(excluded.values())
        if rows <= 0 or tokens <= 0:
            return []
        avgdl = float(tokens) / float(rows)  # as fts5_aux.c computes it
        # Each stem's chunks in scope, matched as FTS5 matches the phrase (by its term).
        excluded_ids = json.dumps(list(excluded))
        all_counts = {stem: matched for stem, (matched, _) in counts.items()}  # as bm25() counts
        doc_counts = {stem: in_scope for stem, (_, in_scope) in counts.items()}
        idfs = {stem: bm25.idf(count, rows) for stem, count in doc_counts.items()}
        bound = bm25.score_bound(idfs[stem] for stem in stems.values())
        # The same plan as FTS5's: terms in half the chunks or more are not matched.
        useful = [stem for stem in stems.values() if doc_counts[stem] < rows / 2]
        useful = useful or list(stems.values())
        # Only stems some chunk in scope holds: one held only out of scope adds nothing,
        # and scoring its chunks would take time that depends on what is out of scope.
        held = sorted({stem for stem in useful if doc_counts[stem]})
        if not held:
            return []
        all_avgdl = float(sum(column_tokens)) / float(all_rows)
        # Per stem: its whole-table idf (to solve for the frequency) and its scoped weight,
        # once per query term that has it (FTS5 phrases).
        weights = {
            stem: (bm25.idf(all_counts[stem], all_rows), idfs[stem] * useful.count(stem))
            for stem in held
        }
        averages = (all_avgdl, avgdl)
        scored = self._scoped_top(cursor, held, weights, doc_counts, averages, excluded_ids, limit)
        return [SearchHit(chunk_id=pk, score=min(1.0, raw / bound)) for pk, raw in scored]

    def _scoped_top(
        self,
        cursor: CursorWrapper,
        held: list[str],
        weights: dict[str, tuple[float, float]],
        doc_counts: dict[str, int],
        averages: tuple[float, float],
        excluded_ids: str,
        limit: int,
    ) -> list[Row]:
        """The best ``limit`` chunks in scope, as scoring every match orders them, scoring
        only the chunks holding the rarer stems when that provably suffices (MaxScore, as
        ``_top`` does for FTS5's own ranking, ADR 0027): a stem adds strictly less than
        ``(k1+1)`` times its scoped weight, so when the ``limit``-th candidate is at or
        above the other stems' ceilings together, no chunk holding only those can enter."""
        by_rarity = bm25.rarest_first(held, doc_counts)
        taken = bm25.covering(by_rarity, doc_counts, limit)
        rare, common = by_rarity[:taken], by_rarity[taken:]
        found = sum(doc_counts[stem] for stem in rare)
        total = sum(doc_counts[stem] for stem in held)
        if common and found <= total * CANDIDATE_SHARE:
            scored = self._scoped_rank(
                cursor, held, weights, averages, excluded_ids, limit, candidates=rare
            )
            floor = scored[-1][1] if len(scored) == limit else 0.0
            if sum((bm25.K1 + 1) * weights[stem][1] for stem in common) <= floor:
                return scored
        return self._scoped_rank(cursor, held, weights, averages, excluded_ids, limit)

    @staticmethod
    def _scoped_rank(
        cursor: CursorWrapper,
        held: list[str],
        weights: dict[str, tuple[float, float]],
        averages: tuple[float, float],
        excluded_ids: str,
        limit: int,
        *,
        candidates: list[str] | None = None,
    ) -> list[Row]:
        """``_SCOPED_BM25_SQL`` over the chunks holding any of ``candidates`` (every match
        when None): the other stems' bm25() is then computed for those chunks only."""
        parts: list[str] = []
        params: list[str | int | float] = []
        if candidates is not None:
            params.append(" OR ".join(_quote(c) for c in candidates))
        for t, stem in enumerate(held):
            restricted = candidates is not None and stem not in candidates
            part = _CANDIDATE_MATCH_SQL if restricted else _MATCH_SQL
            parts.append(part.format(t=t, fts=FTS_TABLE, title=float(bm25.TITLE_WEIGHT)))
            params.append(_quote(stem))
        sql = _SCOPED_BM25_SQL.format(
            matches=" UNION ALL ".join(parts),
            terms=", ".join(["(%s, %s, %s)"] * len(held)),
            lengths=LENGTH_TABLE,
            k1=float(bm25.K1),
            b=float(bm25.B),
        )
        if candidates is not None:
            sql = sql.replace("WITH ", "WITH " + _CANDIDATES_CTE.format(fts=FTS_TABLE), 1)
        for t, stem in enumerate(held):
            params += [t, *weights[stem]]
        params += [excluded_ids, *averages, limit]
        cursor.execute(sql, params)
        return [(int(pk), float(raw)) for pk, raw in cursor.fetchall()]
