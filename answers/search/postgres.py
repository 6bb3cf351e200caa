"""Search on PostgreSQL full-text search, scored exactly like the SQLite FTS5 backend.

Migration 0004 stores on each chunk ``search_vector`` (document title with weight A, chunk
text with weight B, both through ``answers_english``: snowball english stemming, no stop
words, punctuation made a separator like FTS5's unicode61) and ``search_length`` (its
number of token positions), kept current by triggers on chunks and on document titles,
with a GIN index on the vector.

Normalization (ADR 0007; the same as FTS5's, ADR 0003): a chunk's raw score is FTS5's
BM25, computed in SQL over the chunk's own vector::

    sum over the query's terms of  idf * f * (k1+1) / (f + k1 * (1 - b + b * dl / avgdl))

with k1 = 1.2, b = 0.75, f = 2 * (title positions) + (text positions) of the term's
lexeme, dl = ``search_length``, avgdl = its average over all chunks, and
idf = ln((N - n + 0.5) / (n + 0.5)) from the term's chunk count n among N chunks,
replaced by 1e-6 when <= 0. Each term adds less than ``idf * (k1+1)``, so the raw score is
divided by ``(k1+1) * sum(idf)`` over *all* the query's terms (one the corpus lacks counts
at the highest idf, n = 0) and clamped to 1.0: the share of the question's evidence a
chunk carries, on the same 0..1 scale as FTS5, so one ``SCORE_THRESHOLD`` means the same on
both. As in FTS5's plan, terms in half the chunks or more (idf clamped to ~0) are left out
of the match and of the sum but still count in the bound. ``ts_rank`` is not used: it has
no idf, so it cannot rank or pre-filter by BM25 (``ts_rank_cd`` only counts a lexeme's
weighted positions, ``_bm25_sql``). The shortcuts are exact: chunks holding only common
terms are left unscored when they provably cannot reach the result (``_top``), and so are
chunks whose ceiling (the question's lexemes they hold) is under a known floor (``_score``).

Differences from FTS5: snowball (Porter2) instead of the original Porter stemmer, so a few
words stem differently; no diacritics folding ("café" does not match "cafe"); at most 256
positions per lexeme and positions capped at 16383 (PostgreSQL's tsvector limits, far
beyond a chunk of the default size).

Access scope (ADR 0009): with ``documents``, every query above (each term's chunk count,
N, avgdl, the scoring) runs on the chunks of those documents only, so N, n, avgdl and the
bound are those of the asker's scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorField
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import FloatField, IntegerField, Q, QuerySet
from django.db.models.expressions import RawSQL

from ..models import Chunk, Document
from . import bm25
from .base import SearchHit, TermCache, query_terms

CONFIG = "answers_english"  # created by migration 0004

# The weights ts_rank_cd gives positions {D, C, B, A}: a text (B) position 1 / title
# weight, a title (A) one 1 (it allows no weight above 1), so that the title weight times
# ts_rank_cd of one lexeme is its BM25 frequency (below). D and C never occur.
_RANK_WEIGHTS = [0.1, 0.1, 1 / bm25.TITLE_WEIGHT, 1.0]
# One scoring pass in one statement (ADR 0027): ``c`` is every candidate (a chunk in scope
# holding a ``matching`` lexeme) with its ceiling ``ub``, the sum of ``(k1+1) * idf`` over
# the question's lexemes it holds (``@@`` on its vector: a binary search in the row, a
# third of scoring it). The ``seed`` best ceilings are scored; the limit-th of their
# scores, or the ``floor`` passed in if higher, is the floor, and of the other candidates
# only those whose ceiling is above it are scored: a chunk's score is strictly below its
# ceiling, so the rest cannot reach the result (the passes' proof, per chunk).
# Parameters: the candidates' (SQL and parameters inlined), the score's, seed size,
# limit - 1, floor, the score's again, limit.
_BOUNDED_SQL = """
WITH c (id, ub, dl) AS MATERIALIZED ({candidates}),
seed AS MATERIALIZED (
    SELECT s.id, ({score_s}) AS score
    FROM (SELECT id FROM c ORDER BY ub DESC, dl, id LIMIT %s) AS top
    JOIN "answers_chunk" AS s ON s.id = top.id
),
floor AS (
    SELECT coalesce(
        greatest((SELECT score FROM seed ORDER BY score DESC LIMIT 1 OFFSET %s), %s::float8),
        '-Infinity'
    ) AS value
)
SELECT id, score FROM seed
UNION ALL
SELECT s.id, ({score_s}) FROM c JOIN "answers_chunk" AS s ON s.id = c.id
WHERE c.ub > (SELECT value FROM floor) AND c.id NOT IN (SELECT id FROM seed)
ORDER BY 2 DESC, 1
LIMIT %s
"""
# How many of the best ceilings are scored first, per result row: enough that the floor
# is usually the final one, few enough to cost little (a chunk scored costs ~5 µs).
SEED_PER_RESULT = 4
# Per-chunk ceilings pay only from this many distinct lexemes on: with one, every
# candidate has the same ceiling; with two, reading it costs about what scoring saves.
CEILINGS_FROM = 3
# Each term's first lexeme, as the index stores it (the same cleaning and configuration).
_LEXEMES_SQL = f"""
SELECT t.ord, (
    SELECT v.lexeme
    FROM unnest(to_tsvector('{CONFIG}', answers_search_clean(t.term))) AS v
    ORDER BY v.positions[1] LIMIT 1
)
FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, ord)
"""  # noqa: S608 (CONFIG is a constant)


# N and the total length (lexeme ''), and each lexeme's chunks, over the whole index, from
# the ledger the index triggers keep (migration 0011). Parameter: '' and the lexemes.
_LEDGER_SQL = (
    "SELECT lexeme, sum(chunks), sum(tokens) FROM answers_search_stats "
    "WHERE lexeme = ANY(%s) GROUP BY lexeme"
)
# The same over a scope (ADR 0009): the whole index's figures less those of the chunks out
# of scope, counted in the same statement (the documents out of scope first, then their
# chunks by the document_id index: linear in the chunks out of scope). Parameters: '' and
# the lexemes, the same as ``_quoted`` operands, the scope's, '' and the lexemes again.
_SCOPED_LEDGER_SQL = """
WITH q (lexeme, query) AS (
    SELECT lexeme, to_tsquery('simple'::regconfig, query) FROM unnest(%s::text[], %s::text[])
    AS u (lexeme, query)
),
o AS MATERIALIZED (
    SELECT c."search_vector" AS v, c."search_length" AS dl FROM "answers_chunk" AS c
    WHERE c."document_id" IN (
        SELECT d."id" FROM "answers_document" AS d WHERE d."id" NOT IN ({scope})
    )
),
outside AS (
    SELECT q.lexeme,
           count(*) FILTER (WHERE q.lexeme = '' OR o.v @@ q.query) AS chunks,
           sum(o.dl) FILTER (WHERE q.lexeme = '') AS tokens
    FROM q CROSS JOIN o GROUP BY q.lexeme
)
SELECT s.lexeme, s.chunks - coalesce(outside.chunks, 0), s.tokens - coalesce(outside.tokens, 0)
FROM ({ledger}) AS s (lexeme, chunks, tokens) LEFT JOIN outside ON outside.lexeme = s.lexeme
"""
# One lexeme as ``_tsquery`` matches it (a constant, folded when the statement is planned).
_TSQUERY_SQL = "to_tsquery('simple'::regconfig, %s)"

_LEXEMES = TermCache()  # each term through to_tsvector once per process


def _quoted(lexeme: str) -> str:
    """``lexeme`` as one operand of a raw tsquery."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _tsquery(lexemes: Sequence[str]) -> SearchQuery:
    """Any of ``lexemes``, matched as they are: 'simple' only lower-cases, never stems."""
    return SearchQuery(" | ".join(_quoted(x) for x in lexemes), config="simple", search_type="raw")


def _matching(lexemes: Sequence[str]) -> Q:
    """Chunks holding any of ``lexemes`` (a GIN index lookup), on ``_chunks()``."""
    return Q(search_vector=_tsquery(lexemes))


def _chunks(documents: QuerySet[Document] | None) -> QuerySet[Chunk]:
    """Chunks in the scope (of ``documents``; all when None), with their vector."""
    # The columns are not model fields (SQLite has none), so they come in as expressions.
    chunks = Chunk.objects.annotate(
        search_vector=RawSQL('"answers_chunk"."search_vector"', [], SearchVectorField())
    )
    return chunks if documents is None else chunks.filter(document__in=documents)


class PostgreSQLBackend:
    """BM25 over PostgreSQL full-text search, on FTS5's scale (ADR 0007)."""

    name = "postgresql"
    vendor = "postgresql"  # the database it needs (a system check compares it)

    def search(
        self,
        query: str,
        *,
        limit: int,
        documents: QuerySet[Document] | None = None,
        exhaustive: bool = False,
    ) -> list[SearchHit]:
        lexemes = self.lexemes(query_terms(query))
        if not lexemes:
            return []
        chunks = _chunks(documents)
        stats = self.statistics(set(lexemes), documents)
        if stats is None:
            return []
        rows, avgdl, doc_counts = stats
        idfs = {lexeme: bm25.idf(doc_counts[lexeme], rows) for lexeme in doc_counts}
        bound = bm25.score_bound(idfs[lexeme] for lexeme in lexemes)
        # A term in half the chunks or more cannot move a score (its idf is clamped to
        # ~0) but would make nearly every row match and be scored. Leave it out, as FTS5's
        # plan does; when every term is that common, keep them all.
        useful = [lexeme for lexeme in lexemes if doc_counts[lexeme] < rows / 2] or lexemes
        if exhaustive:
            scored = self._score_every(chunks, useful, idfs, avgdl, useful, limit)
        else:
            scored = self._top(chunks, useful, idfs, doc_counts, avgdl, limit)
        return [SearchHit(chunk_id=pk, score=min(1.0, raw / bound)) for pk, raw in scored]

    def search_exhaustive(self, query: str, *, limit: int) -> list[SearchHit]:
        """``search(documents=None)`` scoring every match (no MaxScore pass): the
        reference the bounded top-k is tested and benched against."""
        return self.search(query, limit=limit, exhaustive=True)

    def statistics(
        self, lexemes: set[str], documents: QuerySet[Document] | None
    ) -> tuple[int, float, dict[str, int]] | None:
        """N, avgdl and each lexeme's chunk count over the scope; None when nothing in
        scope holds any of ``lexemes`` (or the scope is empty).

        The whole index's figures are read from ``answers_search_stats`` (migration 0011:
        kept by the index triggers, an index lookup per lexeme, never a count of chunks).
        With a scope, the chunks out of it are counted and taken off (ADR 0009, as the
        SQLite backend does): linear in the chunks out of scope, not in the corpus. One
        statement either way (``_LEDGER_SQL``, ``_SCOPED_LEDGER_SQL``).
        """
        ordered = sorted(lexemes)
        sql, params = _LEDGER_SQL, list[Any]([["", *ordered]])
        if documents is not None:
            # The access rule stays in the queryset (selectors): only its SQL is used here.
            try:
                scope, scope_params = documents.order_by().values("pk").query.sql_with_params()
            except EmptyResultSet:
                return None
            sql = _SCOPED_LEDGER_SQL.format(scope=scope, ledger=_LEDGER_SQL)
            params = [
                ["", *ordered],
                [None, *(_quoted(lexeme) for lexeme in ordered)],
                *scope_params,
                ["", *ordered],
            ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = {lexeme: (int(n), int(tokens)) for lexeme, n, tokens in cursor.fetchall()}
        rows, tokens = found.get("", (0, 0))
        doc_counts = {lexeme: found.get(lexeme, (0, 0))[0] for lexeme in ordered}
        if rows <= 0 or tokens <= 0 or not any(doc_counts.values()):
            return None
        return rows, float(tokens) / float(rows), doc_counts

    def _top(
        self,
        chunks: QuerySet[Chunk],
        useful: list[str],
        idfs: dict[str, float],
        doc_counts: dict[str, int],
        avgdl: float,
        limit: int,
    ) -> list[tuple[int, float]]:
        """The best ``limit`` chunks holding any of ``useful``, exactly, scoring fewer.

        A term adds strictly less than ``(k1+1) * idf`` to any chunk, so a chunk holding
        only some common terms scores below the sum of their ceilings. Chunks holding the
        rarer terms are scored first; when the ``limit``-th of them is at or above the
        common terms' ceiling, the chunks holding only common terms cannot enter the
        result and are never scored (MaxScore pruning: the result is the same as scoring
        every matching chunk; FTS5 scores them all).
        """

        def ceiling(skipped: list[str]) -> float:
            return sum((bm25.K1 + 1) * idfs[x] for x in useful if x in skipped)

        # Rarest first; start with the fewest rare lexemes that may fill the result.
        by_rarity = bm25.rarest_first(useful, doc_counts)
        first = by_rarity[: bm25.covering(by_rarity, doc_counts, limit)]
        scored = self._score(chunks, useful, idfs, avgdl, first, limit)
        skipped = by_rarity[len(first) :]
        if not skipped:
            return scored
        floor = scored[-1][1] if len(scored) == limit else 0.0
        if ceiling(skipped) <= floor:
            return scored
        # Skip only the commonest lexemes whose ceiling is under the floor found so far:
        # scoring more chunks can only raise the floor, so this pass is exact.
        while skipped and ceiling(skipped) > floor:
            skipped.pop(0)
        matching = by_rarity[: len(by_rarity) - len(skipped)]
        # The first pass's chunks hold these lexemes too: its floor holds for this pass.
        return self._score(chunks, useful, idfs, avgdl, matching, limit, floor=floor or None)

    def _score(
        self,
        chunks: QuerySet[Chunk],
        useful: list[str],
        idfs: dict[str, float],
        avgdl: float,
        matching: list[str],
        limit: int,
        floor: float | None = None,
    ) -> list[tuple[int, float]]:
        """The best ``limit`` chunks holding any of ``matching``, scored on all ``useful``:
        exactly ``_score_every``'s result, scoring only the chunks whose ceiling (the
        question's lexemes they hold) can reach it, in one statement (``_BOUNDED_SQL``).
        ``floor``: a score ``limit`` of these chunks are known to reach (an earlier pass's
        result, on fewer lexemes), so no chunk whose ceiling is at or under it is scored."""
        if len(set(useful)) < CEILINGS_FROM:
            return self._score_every(chunks, useful, idfs, avgdl, matching, limit)
        k1 = bm25.K1
        weights: dict[str, float] = {}
        for lexeme in useful:  # a repeated term counts once per occurrence, as in the score
            weights[lexeme] = weights.get(lexeme, 0.0) + (k1 + 1) * idfs[lexeme]
        held = " + ".join(
            f'(CASE WHEN "answers_chunk"."search_vector" @@ {_TSQUERY_SQL} '
            "THEN %s::float8 ELSE 0 END)"
            for _ in weights
        )
        ceiling = RawSQL(  # noqa: S611 (constant SQL, bound values)
            held,
            [value for item in weights.items() for value in (_quoted(item[0]), item[1])],
            FloatField(),
        )
        length = RawSQL('"answers_chunk"."search_length"', [], IntegerField())
        candidates = (
            chunks.filter(_matching(matching))
            .annotate(ub=ceiling, dl=length)
            .order_by()
            .values_list("pk", "ub", "dl")
        )
        candidates_sql, candidates_params = candidates.query.sql_with_params()
        score_sql, score_params = _bm25_sql("s", useful, idfs, avgdl)
        sql = _BOUNDED_SQL.format(candidates=candidates_sql, score_s=score_sql)
        params = [
            *candidates_params,
            *score_params,
            SEED_PER_RESULT * limit,
            limit - 1,
            floor,
            *score_params,
            limit,
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [(int(pk), float(raw)) for pk, raw in cursor.fetchall()]

    def _score_every(
        self,
        chunks: QuerySet[Chunk],
        useful: list[str],
        idfs: dict[str, float],
        avgdl: float,
        matching: list[str],
        limit: int,
    ) -> list[tuple[int, float]]:
        """``_score`` scoring every chunk that holds any of ``matching`` (the exhaustive
        search's reference)."""
        score_sql, params = _bm25_sql('"answers_chunk"', useful, idfs, avgdl)
        score = RawSQL(score_sql, params, FloatField())  # noqa: S611 (constant SQL, bound values)
        return list(
            chunks.filter(_matching(matching))
            .annotate(bm25=score)
            .order_by("-bm25", "pk")
            .values_list("pk", "bm25")[:limit]
        )

    def maintain(self) -> None:
        """After a bulk write: fold the ledger's dead rows away and refresh the planner's
        statistics, which autovacuum would do later (or never, where it is off). A
        ledger left with a bulk load's dead rows made every question's statistics read
        38 ms instead of 0.1 (1.2M dead rows after the four Debian doc sets)."""
        with connection.cursor() as cursor:
            if not connection.in_atomic_block:  # VACUUM cannot run in a transaction
                cursor.execute("VACUUM (ANALYZE) answers_search_stats")
                # Marks the documents' pages all-visible, so the scope's reads of every
                # document's access and id stay index-only (migration 0015) without a
                # visit to each row (autovacuum would, later).
                cursor.execute("VACUUM (ANALYZE) answers_document")
            # New vectors wait in the GIN index's pending list, which every search scans
            # in full until it is merged (fastupdate): merge it now.
            cursor.execute("SELECT gin_clean_pending_list('answers_chunk_search_vector')")
            for table in ("answers_search_stats", "answers_chunk", "answers_document"):
                cursor.execute(f"ANALYZE {table}")

    def lexemes(self, terms: list[str]) -> list[str]:
        """Each term's lexeme, one per term in order (duplicates kept: each is a term of
        the query, as each is an FTS5 phrase); terms that yield none are dropped."""
        known = _LEXEMES.get_many(terms, _lexemes_of)
        return [lexeme for term in terms if (lexeme := known[term])]


def _bm25_sql(
    table: str, useful: list[str], idfs: dict[str, float], avgdl: float
) -> tuple[str, list[object]]:
    """The raw BM25 of the chunk ``table`` (a table or alias) for the ``useful`` lexemes
    (a repeated one counts once per occurrence), in the order FTS5's bm25() computes it,
    and its parameters.

    Each distinct lexeme's frequency f = title weight * (title positions) + (text
    positions) is the title weight times its ``ts_rank_cd`` with ``_RANK_WEIGHTS``: for a
    one-lexeme query every position of it is a cover of its own, worth its weight, and
    nothing else counts. One C call per lexeme on the row's vector, instead of cutting the
    vector down to the question's lexemes and joining their unnested positions (ADR 0027:
    about half the cost a chunk, the same frequencies). OFFSET 0 keeps each call from being
    copied into every use of its f.
    """
    distinct = list(dict.fromkeys(useful))
    column = {lexeme: i for i, lexeme in enumerate(distinct)}
    k1, b = bm25.K1, bm25.B
    terms = " + ".join(
        f"%s::float8 * ((x.f{column[x]} * (%s::float8 + 1)) / (x.f{column[x]} + x.n))"
        for x in useful
    )
    freqs = ", ".join(
        f'%s::float8 * ts_rank_cd(%s::float4[], {table}."search_vector", {_TSQUERY_SQL}) '
        f"AS f{column[x]}"
        for x in distinct
    )
    norm = f'%s::float8 * (1 - %s::float8 + %s::float8 * {table}."search_length" / %s::float8)'
    sql = f"(SELECT {terms} FROM (SELECT {freqs}, {norm} AS n OFFSET 0) AS x)"  # noqa: S608
    params: list[object] = [value for x in useful for value in (idfs[x], k1)]
    for x in distinct:
        params += [bm25.TITLE_WEIGHT, _RANK_WEIGHTS, _quoted(x)]
    params += [k1, b, b, avgdl]
    return sql, params


def _lexemes_of(terms: list[str]) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(_LEXEMES_SQL, [terms])
        found = dict(cursor.fetchall())
    return {term: found[position] for position, term in enumerate(terms, 1) if found[position]}
