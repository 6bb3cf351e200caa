from __future__ import annotations

import math

import pytest
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st

from answers.conf import answers_settings
from answers.models import Chunk, Document
from answers.registry import get_search_backend
from answers.search import bm25
from answers.search.base import query_terms
from tests.corpus import ingest_text

# These run on whichever database the suite runs on, against the backend chosen for it
# (SQLite FTS5 or PostgreSQL): both must behave alike (docs/scores.md, ADR 0007).
pytestmark = pytest.mark.django_db


def titles(query: str, limit: int = 5) -> list[str]:
    hits = get_search_backend().search(query, limit=limit)
    chunks = Chunk.objects.select_related("document").in_bulk([h.chunk_id for h in hits])
    return [chunks[h.chunk_id].document.title for h in hits]


def test_scores_are_normalized_and_best_first():
    hits = get_search_backend().search("lambda expression", limit=20)
    assert hits
    scores = [h.score for h in hits]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("question", "expected_title"),
    [
        ("What is a lambda expression?", "Lambdas"),
        ("How does the try statement handle exceptions?", "The try statement"),
        ("What does the global statement do?", "The global statement"),
    ],
)
def test_on_topic_questions_find_their_topic_above_the_threshold(question, expected_title):
    hits = get_search_backend().search(question, limit=5)
    assert expected_title in titles(question)
    assert hits[0].score >= answers_settings.SCORE_THRESHOLD


@pytest.mark.parametrize(
    "question",
    [
        "Who won the football world cup?",
        "How long should I cook pasta?",
        "What is the best recipe for chocolate cake?",
        "Which football team has the best goalkeeper?",
    ],
)
def test_off_topic_questions_fall_under_the_default_threshold(question):
    hits = get_search_backend().search(question, limit=5)
    assert all(h.score < answers_settings.SCORE_THRESHOLD for h in hits)


def test_stemming_matches_other_word_forms():
    ingest_text("t:stem", "Zorbling", "The zorblers were zorbling happily.")
    assert "Zorbling" in titles("zorbler")


def test_index_follows_writes_to_chunks_and_titles():
    result = ingest_text("t:live", "Quixotic", "Flibbertigibbet appears here.")
    assert "Quixotic" in titles("flibbertigibbet")
    Document.objects.filter(pk=result.document.pk).update(title="Renamed")
    Document.objects.get(pk=result.document.pk).save()  # the trigger fires on UPDATE OF title
    assert "Renamed" in titles("flibbertigibbet")
    result.document.delete()
    assert titles("flibbertigibbet") == []


def test_query_syntax_in_a_question_is_only_text():
    # FTS5 operators and quotes in user text must neither error nor change the query.
    for question in ['"unbalanced', "NEAR(a b)", "lambda OR *", "x AND NOT y", "^col:lambda"]:
        get_search_backend().search(question, limit=5)


def test_query_terms_drop_filler_but_keep_code_keywords():
    assert query_terms("How does the WITH statement work, and is it for loops?") == [
        "with",
        "statement",
        "and",
        "is",
        "for",
        "loops",
    ]


def test_words_in_most_chunks_do_not_change_the_ranking():
    backend = get_search_backend()
    plain = backend.search("lambda expression", limit=5)
    padded = backend.search("lambda expression is in for with not", limit=5)
    assert [h.chunk_id for h in padded][:3] == [h.chunk_id for h in plain][:3]


def test_a_question_made_only_of_common_words_still_searches():
    assert get_search_backend().search("is in", limit=5)


def test_the_backend_fits_the_database():
    expected = {"sqlite": "sqlite-fts5", "postgresql": "postgresql"}[connection.vendor]
    assert get_search_backend().name == expected


def test_a_title_match_outranks_the_same_word_in_the_text():
    ingest_text("t:title-weight-a", "Wombatry", "A field guide to burrows and their diggers.")
    ingest_text("t:title-weight-b", "Field notes", "Wombatry is mentioned here once, in passing.")
    hits = get_search_backend().search("wombatry", limit=5)
    assert titles("wombatry") == ["Wombatry", "Field notes"]
    assert hits[0].score > hits[1].score


def test_punctuation_separates_words_as_in_the_question():
    # "os.path.join" must index as os / path / join, the terms query_terms() produces.
    ingest_text("t:dotted", "Snippets", "Call glorbify.frobnicate_widget(x) to start.")
    assert "Snippets" in titles("frobnicate widget")
    assert "Snippets" in titles("glorbify")


def test_re_ingesting_a_changed_body_replaces_what_is_found():
    ingest_text("t:reingest", "Notes", "Snorkelwort grows here.")
    assert titles("snorkelwort") == ["Notes"]
    ingest_text("t:reingest", "Notes", "Bramblequat grows here.")
    assert titles("snorkelwort") == []
    assert titles("bramblequat") == ["Notes"]


@pytest.mark.parametrize("question", ["How do the?", "Why would they?", "xyzzyq plugh", "", "?!"])
def test_a_question_of_only_stopwords_or_unknown_words_finds_nothing(question):
    assert get_search_backend().search(question, limit=5) == []


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite FTS5 index")
def test_sqlite_has_the_fts5_index_and_no_postgres_columns():
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        columns = [
            c.name for c in connection.introspection.get_table_description(cursor, "answers_chunk")
        ]
    assert {"answers_chunk_fts", "answers_chunk_fts_vocab"} <= set(tables)
    assert "search_vector" not in columns
    assert "search_length" not in columns


def test_the_shared_bound_is_fts5s_clamped_idf_times_k1_plus_1():
    assert bm25.idf(0, 10) == pytest.approx(math.log(10.5 / 0.5))  # a term the corpus lacks
    assert bm25.idf(5, 10) == bm25.MIN_IDF  # in half the rows: clamped as FTS5 does
    assert bm25.score_bound([1.0, 2.0]) == pytest.approx((bm25.K1 + 1) * 3.0)


# --- the access scope (ADR 0009) ---------------------------------------------------------

SCOPE_QUESTIONS = [
    "What is a lambda expression?",
    "Nightjar zeppelin hangar launch",
    "zeppelin lambda expression",
    "How does the with statement call a context manager?",
    "lambda lambdas expression is in",
    "is in for with not",
    "Who won the football world cup?",
]


@pytest.mark.parametrize("limit", [1, 40])
def test_an_outsiders_search_is_that_of_a_corpus_without_what_they_may_not_view(asker, limit):
    from answers.selectors import document_list_visible

    backend = get_search_backend()
    scoped = {
        q: backend.search(q, limit=limit, documents=document_list_visible(user=asker))
        for q in SCOPE_QUESTIONS
    }
    Document.objects.filter(access=Document.Access.GROUPS).delete()
    for question, hits in scoped.items():
        unscoped = backend.search(question, limit=limit)
        assert [h.chunk_id for h in hits] == [h.chunk_id for h in unscoped], question
        for mine, theirs in zip(hits, unscoped, strict=True):
            assert mine.score == pytest.approx(theirs.score, rel=1e-12), question


def test_an_empty_scope_finds_nothing(django_user_model):
    from answers.selectors import document_list_visible

    inactive = django_user_model.objects.create_user(username="gone", is_active=False)
    for documents in (Document.objects.none(), document_list_visible(user=inactive)):
        assert get_search_backend().search("lambda expression", limit=5, documents=documents) == []


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite FTS5 index")
@pytest.mark.parametrize("limit", [1, 5, 200])
def test_the_scoped_formula_is_fts5s_own_bm25(limit):
    # With nothing out of scope, the score computed from the vocabulary is FTS5's rank.
    from answers.search.sqlite_fts5 import SQLiteFTS5Backend

    backend = SQLiteFTS5Backend()
    for question in SCOPE_QUESTIONS:
        native = backend.search(question, limit=limit)
        with connection.cursor() as cursor:
            computed = backend.search_scoped(cursor, question, limit=limit, excluded={})
        assert [h.chunk_id for h in computed] == [h.chunk_id for h in native], question
        for mine, theirs in zip(computed, native, strict=True):
            assert mine.score == pytest.approx(theirs.score, rel=1e-12), question


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite FTS5 index")
def test_chunk_lengths_follow_every_write_to_the_index():
    # The scoped search reads each chunk's length from answers_chunk_fts_length (migration
    # 0006); it must be FTS5's own (docsize) after inserts, updates, renames and deletes.
    from answers.search.sqlite_fts5 import _varints

    result = ingest_text("t:lengths", "Two words", "one two three two")
    document = result.document
    long_chunk = Chunk.objects.create(  # a 3-byte varint: over 16383 tokens
        document=document, ordinal=99, text="word " * 20_000, start=0, end=0
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT tokens FROM answers_chunk_fts_length WHERE id = %s", [long_chunk.pk])
        assert cursor.fetchone()[0] == 20_000 + 2  # and the title's two words
    Chunk.objects.filter(pk=long_chunk.pk).update(text="shorter " * 300)
    Document.objects.filter(pk=document.pk).update(title="Now four title words")
    result = ingest_text("t:lengths-gone", "Gone", "to be deleted")
    result.document.delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.id, d.sz, l.tokens FROM answers_chunk_fts_docsize d "
            "LEFT JOIN answers_chunk_fts_length l ON l.id = d.id"
        )
        rows = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM answers_chunk_fts_length")
        (lengths,) = cursor.fetchone()
    assert lengths == len(rows) == Chunk.objects.count()
    assert all(tokens == sum(_varints(size)) for _, size, tokens in rows)
    by_id = {pk: tokens for pk, _, tokens in rows}
    assert by_id[long_chunk.pk] == 300 + 4


def test_generators_does_not_match_general_public_license():
    # Porter stemmed both to "gener" (ADR 0013); Snowball keeps them apart.
    ingest_text(
        "t:gpl", "Licence terms", "This is free software under the GNU General Public "
        "License; see the General Public License for general details. " * 3,
    )  # fmt: skip
    assert "Licence terms" not in titles("How do generators work?", limit=40)
    assert "Licence terms" in titles("general public license")
    assert "The yield statement" in titles("generators yield")


def test_the_index_stems_words_of_one_family_together():
    ingest_text("t:stem", "Quuxing", "The quuxers quuxed while quuxing a quux.")
    for form in ("quux", "quuxing", "quuxed"):
        assert "Quuxing" in titles(form)


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40))
def test_accent_folding_is_nfkd_without_combining_marks(text: str) -> None:
    """The fast fold (non-ASCII runs only, one str.translate) is the plain definition."""
    import unicodedata

    from answers.search.stemming import _fold

    decomposed = unicodedata.normalize("NFKD", text.lower())
    assert _fold(text) == "".join(c for c in decomposed if not unicodedata.combining(c))


def test_remembered_terms_are_the_tokenizers_own():
    # A term goes through the database's tokenizer once per process (base.TermCache); what
    # is remembered must be what the database gives, also once the bounded cache has been
    # cleared for being full.
    from answers.search import base

    backend = get_search_backend()
    terms = [*query_terms(" ".join(SCOPE_QUESTIONS)), "naïve", "---", "try"]
    cache = base.TermCache(size=5)
    asked: list[list[str]] = []
    fresh = base.TermCache().get_many(terms, lambda missing: _tokens(backend, missing))

    def compute(missing: list[str]) -> dict[str, str]:
        asked.append(missing)
        return _tokens(backend, missing)

    for start in range(0, len(terms), 3):  # fills and clears the cache several times
        part = terms[start : start + 3]
        assert cache.get_many(part, compute) == {t: fresh[t] for t in part}
        assert len(cache._known) <= 5
    asked.clear()
    assert cache.get_many(terms[-2:], compute) == {t: fresh[t] for t in terms[-2:]}
    assert asked == []  # remembered: the database is not asked again
    assert fresh["---"] is None and fresh["try"]


def _tokens(backend, terms: list[str]) -> dict[str, str]:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            return backend._tokenize(cursor, terms)
    from answers.search.postgres import _lexemes_of

    return _lexemes_of(terms)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the SQLite FTS5 index")
@pytest.mark.parametrize("limit", [1, 5, 40])
def test_the_bounded_scoped_search_ranks_as_scoring_every_match(asker, monkeypatch, limit):
    # An outsider's search scores only the chunks holding the rarer stems when that
    # provably suffices (MaxScore); forced to try it on every question, the hits and
    # scores must be those of scoring every match.
    from answers.search import sqlite_fts5
    from answers.selectors import document_list_visible

    backend = sqlite_fts5.SQLiteFTS5Backend()
    scope = document_list_visible(user=asker)
    bounded_runs: list[list[str]] = []
    rank = sqlite_fts5.SQLiteFTS5Backend._scoped_rank

    def spy(*args, candidates=None, **kwargs):  # type: ignore[no-untyped-def]
        if candidates is not None:
            bounded_runs.append(candidates)
        return rank(*args, candidates=candidates, **kwargs)

    monkeypatch.setattr(sqlite_fts5.SQLiteFTS5Backend, "_scoped_rank", staticmethod(spy))
    for question in [*SCOPE_QUESTIONS, "statement expression value object function name"]:
        monkeypatch.setattr(sqlite_fts5, "CANDIDATE_SHARE", 1.0)
        bounded = backend.search(question, limit=limit, documents=scope)
        monkeypatch.setattr(sqlite_fts5, "CANDIDATE_SHARE", 0.0)
        every = backend.search(question, limit=limit, documents=scope)
        assert [h.chunk_id for h in bounded] == [h.chunk_id for h in every], question
        for mine, theirs in zip(bounded, every, strict=True):
            assert mine.score == pytest.approx(theirs.score, rel=1e-12), question
    assert bounded_runs  # the bounded pass did run
