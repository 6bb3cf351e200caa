"""The PostgreSQL backend: its schema, its exact formula, and parity with FTS5 (ADR 0007).

The behaviour tests shared with SQLite are in test_search.py. The parity tests score the
same corpus with a real FTS5 index, built in memory with the SQLite migration's own
statements, and compare.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from answers.conf import answers_settings
from answers.models import Chunk, Document
from answers.registry import get_search_backend
from answers.search import bm25, postgres
from answers.search.base import query_terms
from answers.search.postgres import PostgreSQLBackend
from answers.search.sqlite_fts5 import FTS_TABLE, SQLiteFTS5Backend
from answers.search.stemming import SQL_FUNCTION, stem_text
from tests.corpus import ingest_text

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only"),
]

ON_TOPIC = [
    ("What is a lambda expression?", "lambda"),
    ("How are exceptions raised?", "raise"),
    ("What does the global statement do?", "global"),
    ("How do I write a while loop?", "while"),
    ("What does the assert statement do?", "assert"),
    ("How does the import statement find modules?", "import"),
    ("What does the nonlocal statement do?", "nonlocal"),
    ("What does yield return?", "yield"),
    ("How do I delete a variable?", "del"),
]
OFF_TOPIC = [
    "Who won the football world cup?",
    "How long should I cook pasta?",
    "What is the best recipe for chocolate cake?",
    "Which football team has the best goalkeeper?",
    "How do I change a flat bicycle tyre?",
    "Who painted the Mona Lisa?",
    "How tall is Mount Everest?",
]


def _one(sql: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


# --- schema ---------------------------------------------------------------------------


def test_chunks_have_a_gin_indexed_tsvector_and_no_fts5_table():
    column_type = _one(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'answers_chunk' AND column_name = 'search_vector'"
    )
    assert column_type == "tsvector"
    index = _one(
        "SELECT indexdef FROM pg_indexes "
        "WHERE tablename = 'answers_chunk' AND indexname = 'answers_chunk_search_vector'"
    )
    assert "USING gin (search_vector)" in index
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert FTS_TABLE not in tables
    assert not any(name.startswith("answers_chunk_fts") for name in tables)


def test_every_chunk_has_its_vector_and_length():
    missing = _one(
        "SELECT count(*) FROM answers_chunk WHERE search_vector IS NULL OR search_length <= 0"
    )
    assert missing == 0


def test_the_configuration_keeps_code_keywords_and_splits_on_punctuation():
    lexemes = _one(
        "SELECT tsvector_to_array(to_tsvector('answers_english', "
        "answers_search_clean('with for is not in os.path.join')))"
    )
    assert set(lexemes) == {"with", "for", "is", "not", "in", "os", "path", "join"}


def test_search_length_counts_title_and_text_positions():
    result = ingest_text("t:length", "Two words", "one two three two")
    chunk = result.document.chunks.get()
    length = _one("SELECT search_length FROM answers_chunk WHERE id = %s", [chunk.pk])
    assert length == 6


def test_each_chunk_vector_and_length_are_migration_0004s_formula():
    # The fill trigger's values, including after a document is renamed (its chunks re-filled).
    ingest_text("t:formula", "Café — naïve os.path", "Ünïcode words, os.path.join() and 3.14!")
    ingest_text("t:formula2", "Loops", "for x in range(10): print(x)  # a loop " * 20)
    Document.objects.filter(source_key="t:formula2").update(title="Renamed: while loops")
    differ = _one(
        """
        SELECT count(*) FROM answers_chunk c JOIN answers_document d ON d.id = c.document_id
        CROSS JOIN LATERAL (
            SELECT setweight(to_tsvector('answers_english', answers_search_clean(d.title)), 'A')
                   || setweight(to_tsvector('answers_english', answers_search_clean(c.text)),
                                'B') AS v
        ) AS f
        WHERE c.search_vector IS DISTINCT FROM f.v OR c.search_length <> (
            SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest(f.v)
        )
        """
    )
    assert differ == 0
    assert _one("SELECT count(*) FROM answers_chunk") > 0


def test_the_migration_reverses_and_reapplies_with_existing_chunks():
    # PostgreSQL DDL is transactional: the test's transaction undoes all of this.
    executor = MigrationExecutor(connection)
    leaf = executor.loader.graph.leaf_nodes("answers")
    executor.migrate([("answers", "0003_answer_usage")])
    with connection.cursor() as cursor:
        columns = [
            c.name for c in connection.introspection.get_table_description(cursor, "answers_chunk")
        ]
    assert "search_vector" not in columns
    assert _one("SELECT count(*) FROM pg_ts_config WHERE cfgname = 'answers_english'") == 0
    executor = MigrationExecutor(connection)
    executor.migrate(leaf)
    # The backfill indexed the chunks that were already there.
    assert _one("SELECT count(*) FROM answers_chunk WHERE search_vector IS NULL") == 0
    assert get_search_backend().search("lambda expression", limit=1)


# --- the formula ----------------------------------------------------------------------


def _expected_scores(query: str) -> dict[int, float]:
    """The FTS5 formula computed in Python from each chunk's stored positions."""
    backend = PostgreSQLBackend()
    lexemes = backend.lexemes(query_terms(query))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id, v.lexeme, cardinality(v.positions), "
            "cardinality(array_positions(v.weights, 'A')) "
            "FROM answers_chunk c, unnest(c.search_vector) v"
        )
        rows = cursor.fetchall()
    lengths: dict[int, int] = {}
    freqs: dict[int, dict[str, float]] = {}
    for chunk_id, lexeme, positions, title_positions in rows:
        lengths[chunk_id] = lengths.get(chunk_id, 0) + positions
        freqs.setdefault(chunk_id, {})[lexeme] = positions + title_positions  # title twice
    total = Chunk.objects.count()
    avgdl = sum(lengths.values()) / total
    hits = {x: sum(1 for f in freqs.values() if x in f) for x in set(lexemes)}
    idf = {x: bm25.idf(hits[x], total) for x in hits}
    bound = bm25.score_bound(idf[x] for x in lexemes)
    useful = [x for x in lexemes if hits[x] < total / 2] or lexemes
    scores = {}
    for chunk_id, chunk_freqs in freqs.items():
        if not any(x in chunk_freqs for x in useful):
            continue
        norm = bm25.K1 * (1 - bm25.B + bm25.B * lengths[chunk_id] / avgdl)
        raw = sum(
            idf[x] * chunk_freqs[x] * (bm25.K1 + 1) / (chunk_freqs[x] + norm)
            for x in useful
            if x in chunk_freqs
        )
        scores[chunk_id] = min(1.0, raw / bound)
    return scores


FORMULA_QUESTIONS = [
    *(q for q, _ in ON_TOPIC[:3]),
    *OFF_TOPIC[:2],
    "lambda lambdas expression is in",
    "How does the with statement call a context manager?",
    "What does a yield expression do in a generator function?",
]


@pytest.mark.parametrize("limit", [1, 10, 200])
@pytest.mark.parametrize("question", FORMULA_QUESTIONS)
def test_scores_are_the_fts5_formula_over_the_stored_vectors(question, limit):
    expected = _expected_scores(question)
    hits = get_search_backend().search(question, limit=limit)
    best = sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:limit]
    assert [h.chunk_id for h in hits] == [chunk_id for chunk_id, _ in best]
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.chunk_id], rel=1e-9)


class _Unpruned(PostgreSQLBackend):
    """Scores every matching chunk: what the pruned search must return, exactly."""

    def _top(self, chunks, useful, idfs, doc_counts, avgdl, limit):  # type: ignore[no-untyped-def]
        return self._score_every(chunks, useful, idfs, avgdl, useful, limit)


@pytest.mark.parametrize("ceilings_from", [1, postgres.CEILINGS_FROM])
@pytest.mark.parametrize("seed", [1, postgres.SEED_PER_RESULT])
@pytest.mark.parametrize("limit", [1, 5, 40])
def test_pruning_returns_exactly_what_scoring_every_match_returns(
    monkeypatch, ceilings_from, seed, limit
):
    # Per-chunk ceilings forced on for every question (and a seed of one chunk per result,
    # so the floor is often low and the ceilings decide): the same hits, scores and order.
    monkeypatch.setattr(postgres, "CEILINGS_FROM", ceilings_from)
    monkeypatch.setattr(postgres, "SEED_PER_RESULT", seed)
    pruned, unpruned = PostgreSQLBackend(), _Unpruned()
    for question in [*(q for q, _ in ON_TOPIC), *OFF_TOPIC, *FORMULA_QUESTIONS]:
        assert pruned.search(question, limit=limit) == unpruned.search(question, limit=limit)


def test_the_frequency_from_ts_rank_cd_is_the_positions_count():
    # f = title weight * title positions + text positions, for every (chunk, lexeme) of
    # the corpus: what _bm25_sql reads with ts_rank_cd, counted from the unnested vector.
    mismatched = _one(
        """
        SELECT count(*) FROM answers_chunk AS c
        CROSS JOIN LATERAL unnest(c.search_vector) AS v(lexeme, positions, weights)
        WHERE %s * ts_rank_cd(
                  %s::float4[], c.search_vector, to_tsquery('simple', %s || v.lexeme || %s)
              ) <> cardinality(v.positions)
                 + (%s - 1) * cardinality(array_positions(v.weights, 'A'))
        """,
        [bm25.TITLE_WEIGHT, postgres._RANK_WEIGHTS, "'", "'", bm25.TITLE_WEIGHT],
    )
    assert mismatched == 0


def test_search_vectors_are_kept_in_the_row():
    # Migration 0013: STORAGE MAIN, so scoring never fetches a vector from TOAST.
    storage = _one(
        "SELECT attstorage FROM pg_attribute "
        "WHERE attrelid = 'answers_chunk'::regclass AND attname = 'search_vector'"
    )
    assert storage == "m"


def test_pruning_skips_chunks_that_hold_only_common_terms():
    # "lambda" is rare, "expression" common: the 5 best are found among lambda's chunks,
    # in one scoring pass over them, and expression-only chunks are never scored.
    backend = PostgreSQLBackend()
    scored: list[list[str]] = []
    original = backend._score

    def spy(chunks, useful, idfs, avgdl, matching, limit, **kwargs):  # type: ignore[no-untyped-def]
        scored.append(sorted(matching))
        return original(chunks, useful, idfs, avgdl, matching, limit, **kwargs)

    backend._score = spy  # type: ignore[method-assign]
    assert backend.search("lambda expression", limit=5)
    assert scored == [["lambda"]]


def test_a_term_the_corpus_lacks_lowers_the_score_by_its_full_idf():
    backend = get_search_backend()
    (plain,) = backend.search("lambda", limit=1)
    (padded,) = backend.search("lambda qwzxv", limit=1)
    total = Chunk.objects.count()
    lambda_hits = _one(
        "SELECT count(*) FROM answers_chunk WHERE search_vector @@ 'lambda'::tsquery"
    )
    lambda_idf, unknown_idf = bm25.idf(lambda_hits, total), bm25.idf(0, total)
    assert padded.chunk_id == plain.chunk_id
    assert padded.score == pytest.approx(
        plain.score * lambda_idf / (lambda_idf + unknown_idf), rel=1e-9
    )


# --- parity with FTS5 -----------------------------------------------------------------


class _QmarkCursor:
    """Lets SQLiteFTS5Backend.plan() (written for Django's %s cursor) drive sqlite3."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.cursor = cursor

    def execute(self, sql: str, params: Any = ()) -> None:
        self.cursor.execute(sql.replace("%s", "?"), params)

    def executemany(self, sql: str, rows: Any) -> None:
        self.cursor.executemany(sql.replace("%s", "?"), rows)

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()

    def fetchone(self) -> Any:
        return self.cursor.fetchone()


@pytest.fixture(scope="module")
def fts5(django_db_setup, django_db_blocker) -> Iterator[sqlite3.Connection]:  # type: ignore[no-untyped-def]
    """A real FTS5 index of the test corpus, made by the migrations' own statements
    (0002, 0006, then 0007's Snowball rebuild, which calls the app's stemmer)."""
    fts5_migration = importlib.import_module("answers.migrations.0002_sqlite_fts5")
    later = [
        importlib.import_module(f"answers.migrations.{name}")
        for name in ("0006_scoped_search", "0007_sqlite_fts5_snowball")
    ]
    with django_db_blocker.unblock():
        documents = list(Document.objects.values_list("id", "title"))
        chunks = list(Chunk.objects.values_list("id", "document_id", "text"))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE answers_document (id INTEGER PRIMARY KEY, title TEXT)")
    db.execute("CREATE TABLE answers_chunk (id INTEGER PRIMARY KEY, document_id INT, text TEXT)")
    db.executemany("INSERT INTO answers_document VALUES (?, ?)", documents)
    db.executemany("INSERT INTO answers_chunk VALUES (?, ?, ?)", chunks)
    db.create_function(SQL_FUNCTION, 1, stem_text, deterministic=True)
    for statement in [*fts5_migration.FORWARD, *(s for m in later for s in m.FORWARD)]:
        db.execute(statement)
    yield db
    db.close()


def _fts5_top(db: sqlite3.Connection, question: str) -> tuple[int, float] | None:
    """The best chunk and its score, exactly as SQLiteFTS5Backend.search computes them."""
    cursor = _QmarkCursor(db.cursor())
    planned = SQLiteFTS5Backend().plan(cursor, question)  # type: ignore[arg-type]
    if planned is None:
        return None
    expression, bound = planned
    row = db.execute(
        f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? ORDER BY rank LIMIT 1",
        [expression],
    ).fetchone()
    return None if row is None else (row[0], min(1.0, -row[1] / bound))


def _title(chunk_id: int) -> str:
    """The chunk's demo topic key (``lambda``), or its title for other documents."""
    document = Chunk.objects.select_related("document").get(pk=chunk_id).document
    return document.source_key.removeprefix("python-docs:")


@pytest.mark.parametrize(("question", "expected_title"), ON_TOPIC)
def test_on_topic_questions_score_like_fts5(fts5, question, expected_title):
    threshold = answers_settings.SCORE_THRESHOLD
    fts5_top = _fts5_top(fts5, question)
    (pg_top,) = get_search_backend().search(question, limit=1)
    assert fts5_top is not None
    assert _title(pg_top.chunk_id) == _title(fts5_top[0]) == expected_title
    assert pg_top.score >= threshold
    assert fts5_top[1] >= threshold
    # Both stem with Snowball now (ADR 0013); the tokenizers differ at the edges.
    assert pg_top.score == pytest.approx(fts5_top[1], abs=0.05)


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_off_topic_questions_stay_under_the_threshold_like_fts5(fts5, question):
    threshold = answers_settings.SCORE_THRESHOLD
    fts5_top = _fts5_top(fts5, question)
    pg_hits = get_search_backend().search(question, limit=1)
    fts5_score = fts5_top[1] if fts5_top else 0.0
    pg_score = pg_hits[0].score if pg_hits else 0.0
    assert fts5_score < threshold
    assert pg_score < threshold
    assert pg_score == pytest.approx(fts5_score, abs=0.05)
