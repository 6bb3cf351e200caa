"""The bounded top-k and the statistics kept by the index (ADR 0027), on both databases.

The bounded search (MaxScore candidate passes) must return exactly what scoring every
match returns: the same chunks, in the same order, with the same scores, for any corpus
and question (a hypothesis property over random small corpora). The statistics the
PostgreSQL backend reads from ``answers_search_stats`` must equal a count of the chunks
after every kind of write, and two ingests must not wait on each other's common words.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from answers.models import Chunk, Document
from answers.registry import get_search_backend
from answers.search import postgres, sqlite_fts5
from tests.corpus import ingest_text

pytestmark = pytest.mark.django_db

# Word families (two spellings of one stem make one stem two phrases of the expression),
# drawn with very different frequencies so that some terms are rare and some in most
# chunks: the candidate passes, their pruning and their fallback all get exercised.
VOCABULARY = [
    "lambda", "closure", "closures", "generator", "yield", "yields", "await", "context",
    "manager", "iterate", "iterates", "module", "import", "tuple", "list", "slice",
    "statement", "expression", "value", "name",
]  # fmt: skip
WEIGHTS = [1, 2, 2, 3, 3, 4, 5, 6, 8, 10, 10, 14, 18, 22, 30, 40, 60, 80, 120, 160]
SEARCH = [*VOCABULARY, "absent", "missing"]


class _Rollback(Exception):
    pass


@pytest.fixture
def every_candidate_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The share only decides when a pass is worth trying; at 1.0 every pass is tried.
    monkeypatch.setattr(sqlite_fts5, "CANDIDATE_SHARE", 1.0)
    # PostgreSQL: per-chunk ceilings in every pass, whatever the number of lexemes.
    monkeypatch.setattr(postgres, "CEILINGS_FROM", 1)
    yield


@st.composite
def corpora(draw: Any) -> list[str]:
    """Chunks of text: each a bag of words drawn with the skewed weights."""
    random = draw(st.randoms(use_true_random=False))
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=40))
    return [" ".join(random.choices(VOCABULARY, weights=WEIGHTS, k=size)) for size in sizes]


def _load(texts: list[str]) -> None:
    Document.objects.all().delete()  # the demo corpus, within the rolled-back block
    for i, text in enumerate(texts):
        # One chunk per document; a title word on some, so title weights count too.
        title = f"doc {i} " + ("lambda" if i % 7 == 0 else "")
        ingest_text(f"topk:{i}", title, text)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=corpora(),
    queries=st.lists(
        st.lists(st.sampled_from(SEARCH), min_size=1, max_size=6), min_size=1, max_size=4
    ),
    limit=st.sampled_from([1, 2, 3, 5, 10, 40]),
)
def test_the_bounded_top_k_is_the_exhaustive_ranking(every_candidate_pass, texts, queries, limit):
    backend: Any = get_search_backend()
    try:
        with transaction.atomic():
            _load(texts)
            for words in queries:
                question = " ".join(words)
                bounded = backend.search(question, limit=limit)
                exhaustive = backend.search_exhaustive(question, limit=limit)
                assert [h.chunk_id for h in bounded] == [h.chunk_id for h in exhaustive]
                for mine, theirs in zip(bounded, exhaustive, strict=True):
                    assert mine.score == pytest.approx(theirs.score, rel=1e-12, abs=1e-15)
                    assert 0.0 <= mine.score <= 1.0
            raise _Rollback
    except _Rollback:
        pass


def test_on_the_demo_corpus_the_bounded_top_40_is_the_exhaustive_one(every_candidate_pass):
    backend: Any = get_search_backend()
    for question in (
        "What is a lambda expression?",
        "How does the import statement find and load modules?",
        "How are dictionary keys hashed and compared?",
        "What happens when an exception is not handled by any except clause?",
        "How do I define a function with default argument values?",
    ):
        bounded = backend.search(question, limit=40)
        assert bounded == backend.search_exhaustive(question, limit=40), question


# --- the statistics ----------------------------------------------------------------------


def _ledger() -> dict[str, tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, sum(chunks), sum(tokens) FROM answers_search_stats GROUP BY lexeme"
        )
        return {lexeme: (int(n), int(t)) for lexeme, n, t in cursor.fetchall() if n or t}


def _counted() -> dict[str, tuple[int, int]]:
    """The same figures counted from the chunks themselves (what every search did)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), coalesce(sum(search_length), 0) FROM answers_chunk")
        rows, tokens = cursor.fetchone()
        cursor.execute(
            "SELECT l, count(*) FROM answers_chunk, "
            "unnest(tsvector_to_array(search_vector)) AS l GROUP BY l"
        )
        out = {lexeme: (int(n), 0) for lexeme, n in cursor.fetchall()}
    if rows:
        out[""] = (int(rows), int(tokens))
    return out


postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")
sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite only")


@postgres_only
def test_the_statistics_follow_ingest_delete_re_ingest_and_renames():
    assert _ledger() == _counted()  # the demo corpus, counted by migration 0011 or triggers
    ingest_text("stats:a", "Zeppelin hangar", "The zeppelin hangar opens at dawn. " * 60)
    ingest_text("stats:b", "Hangar doors", "Hangar doors slide on rails.")
    assert _ledger() == _counted()
    assert _ledger()["zeppelin"][0] == _counted()["zeppelin"][0] >= 2
    # Re-ingest with another body: its chunks are replaced.
    ingest_text("stats:a", "Zeppelin hangar", "An airship shed, no longer a zeppelin word.")
    assert _ledger() == _counted()
    Document.objects.filter(source_key="stats:b").update(title="Airship doors")
    assert _ledger() == _counted()
    assert "airship" in _ledger()
    Chunk.objects.filter(document__source_key="stats:a").update(text="plain text")
    assert _ledger() == _counted()
    Document.objects.filter(source_key__startswith="stats:").delete()
    assert _ledger() == _counted()
    assert "zeppelin" not in _ledger() or _counted().get("zeppelin")


@postgres_only
def test_the_ledger_folds_a_lexemes_rows():
    fold_every = importlib.import_module("answers.migrations.0011_postgres_search_stats").FOLD_EVERY
    for i in range(3 * fold_every):
        ingest_text(f"fold:{i}", f"Fold {i}", f"The quokka number {i} hops.")
    with connection.cursor() as cursor:
        for lexeme in ("quokka", ""):
            cursor.execute("SELECT count(*) FROM answers_search_stats WHERE lexeme = %s", [lexeme])
            # Each of these statements wrote the lexeme: one in FOLD_EVERY folded it.
            assert cursor.fetchone()[0] <= fold_every, lexeme
    assert _ledger()["quokka"] == (3 * fold_every, 0)
    assert _ledger() == _counted()


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_ingests_never_wait_on_a_common_words_row(corpus):
    """Ingest A holds its transaction open (and the folding lock) after writing chunks
    full of common words; ingest B writes the same words and commits under a 2 s lock
    timeout: it must not wait for A. Both are counted once A commits."""
    a_wrote, b_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def ingest_a() -> None:
        try:
            with transaction.atomic():
                ingest_text("race:a", "Race A", "statement expression value name " * 20)
                a_wrote.set()
                assert b_done.wait(30)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            a_wrote.set()
        finally:
            connection.close()

    thread = threading.Thread(target=ingest_a)
    thread.start()
    try:
        assert a_wrote.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        try:
            ingest_text("race:b", "Race B", "statement expression value name again " * 20)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
            b_done.set()
    finally:
        thread.join(60)
    assert not errors, errors
    assert _ledger() == _counted()
    for word in ("statement", "express", "valu", "name"):
        assert _ledger()[word] == _counted()[word]


@postgres_only
def test_searches_read_no_chunk_count(django_assert_max_num_queries):
    # The statistics come from the ledger: N, avgdl and every term's count in one query,
    # plus the lexemes and the scoring passes.
    backend = get_search_backend()
    with django_assert_max_num_queries(4):
        assert backend.search("What is a lambda expression?", limit=5)


@sqlite_only
def test_fts5s_totals_are_the_chunk_count_after_every_write():
    backend = sqlite_fts5.SQLiteFTS5Backend()

    def rows() -> int:
        with connection.cursor() as cursor:
            return backend._totals(cursor)[0]

    assert rows() == Chunk.objects.count()
    ingest_text("totals:a", "Totals", "Some words about totals. " * 200)
    assert rows() == Chunk.objects.count()
    ingest_text("totals:a", "Totals", "Fewer words now.")
    assert rows() == Chunk.objects.count()
    Document.objects.filter(source_key="totals:a").delete()
    assert rows() == Chunk.objects.count()
