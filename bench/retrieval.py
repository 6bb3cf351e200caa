"""2. Retrieval: hit@5 on the demo corpus, and query latency on a grown corpus.

``SQLiteFTS5Backend.search`` against the one FTS5 statement it issues (its floor) and
against ``rank_bm25.BM25Okapi`` over the same chunks (the library one would otherwise use).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np
from django.db import connection
from rank_bm25 import BM25Okapi

from answers.models import Chunk
from answers.search.base import query_terms
from answers.search.sqlite_fts5 import FTS_TABLE, SQLiteFTS5Backend

from .corpus import ReplicatedCorpus, words
from .questions import HIT_QUESTIONS, LATENCY_QUESTIONS
from .report import Row, median, p95

HIT_SECTION = "2a. retrieval quality: demo corpus, hit@5"
LATENCY_SECTION = "2b. retrieval latency per query"
LIMIT = 40  # the app's default ANSWERS["CANDIDATES"]
RAW_SQL = f"SELECT rowid, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s ORDER BY rank LIMIT %s"


class Bm25Index:
    """rank_bm25 over (chunk id, title + text) rows, tokenized into lowercase words."""

    def __init__(self, rows: Iterable[tuple[int, str, str]]) -> None:
        # Replicated chunks share their text: tokenize each distinct text once.
        cache: dict[str, list[str]] = {}
        self.ids: list[int] = []
        tokenized: list[list[str]] = []
        for chunk_id, title, text in rows:
            tokens = cache.get(text)
            if tokens is None:
                tokens = cache[text] = words(text)
            self.ids.append(chunk_id)
            tokenized.append(words(title) + tokens)
        self.bm25 = BM25Okapi(tokenized)

    def search(self, question: str, limit: int) -> list[int]:
        scores = self.bm25.get_scores(query_terms(question))
        if limit < len(scores):
            top = np.argpartition(-scores, limit)[:limit]
            top = top[np.argsort(-scores[top], kind="stable")]
        else:
            top = np.argsort(-scores, kind="stable")
        return [self.ids[i] for i in top]


def _chunk_rows() -> list[tuple[int, str, str]]:
    return list(Chunk.objects.order_by("id").values_list("id", "document__title", "text"))


def hit_at_5() -> list[Row]:
    """Share of questions whose expected topic is among the top 5 chunks' documents."""
    rows = _chunk_rows()
    # The expected topic is the document's key in the demo corpus (``python-docs:try``),
    # not its title, which is the page's heading ("The try statement").
    titles = {
        chunk_id: key.split(":", 1)[-1]
        for chunk_id, key in Chunk.objects.values_list("id", "document__source_key")
    }
    backend = SQLiteFTS5Backend()
    bm25 = Bm25Index(rows)
    fts_hits = bm25_hits = 0
    misses = []
    for question, expected in HIT_QUESTIONS:
        found = [titles[hit.chunk_id] for hit in backend.search(question, limit=5)]
        fts_hits += expected in found
        if expected not in found:
            misses.append(f"{question!r} -> {found[:3]}")
        bm25_hits += expected in [titles[i] for i in bm25.search(question, 5)]
    count = len(HIT_QUESTIONS)
    note = f"{count} questions, {len(rows)} chunks; FTS5 misses: " + ("; ".join(misses) or "none")
    return [
        Row(HIT_SECTION, "hit@5, FTS5 backend", fts_hits / count, bm25_hits / count, "",
            "rank_bm25", None, note=note),
    ]  # fmt: skip


def _latencies(
    fns: dict[str, Callable[[str], object]], reps: int, questions: list[str] | None = None
) -> dict[str, list[float]]:
    """Per function and question: the median of ``reps`` timed calls, after one warm-up call.

    The functions take turns on each question, so drift in machine load hits them alike.
    """
    out: dict[str, list[float]] = {name: [] for name in fns}
    for question in LATENCY_QUESTIONS if questions is None else questions:
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for fn in fns.values():
            fn(question)
        for _ in range(reps):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn(question)
                samples[name].append(time.perf_counter() - start)
        for name in fns:
            out[name].append(median(samples[name]))
    return out


def _match_expressions(backend: SQLiteFTS5Backend) -> dict[str, str]:
    """Per question: the MATCH expression exactly as the backend builds it."""
    with connection.cursor() as cursor:
        return {
            question: planned[0]
            for question in LATENCY_QUESTIONS
            if (planned := backend.plan(cursor, question)) is not None
        }


def _raw(matches: dict[str, str]) -> Callable[[str], object]:
    def search(question: str) -> list[tuple[int, float]]:
        with connection.cursor() as cursor:
            cursor.execute(RAW_SQL, [matches[question], LIMIT])
            return cursor.fetchall()

    return search


def latency(corpus: ReplicatedCorpus, label: str, *, reps: int, bm25_reps: int) -> list[Row]:
    backend = SQLiteFTS5Backend()
    sql = _latencies(
        {
            "fts": lambda q: backend.search(q, limit=LIMIT),
            "floor": _raw(_match_expressions(backend)),
        },
        reps,
    )
    fts, floor = sql["fts"], sql["floor"]
    start = time.perf_counter()
    index = Bm25Index(_chunk_rows())
    build = time.perf_counter() - start
    bm25 = _latencies({"bm25": lambda q: index.search(q, LIMIT)}, bm25_reps)["bm25"]
    speed_target = ("<=", 0.01) if corpus.chunks >= 100_000 else None
    size = f"@{label} ({corpus.chunks:,} chunks)"
    return [
        Row(LATENCY_SECTION, f"FTS5 backend median {size}", median(fts), median(floor), "s",
            "raw FTS5 SQL", ("<=", 1.5)),
        Row(LATENCY_SECTION, f"FTS5 backend p95 {size}", p95(fts), p95(floor), "s",
            "raw FTS5 SQL", ("<=", 1.5)),
        Row(LATENCY_SECTION, f"FTS5 backend vs rank_bm25 median {size}", median(fts),
            median(bm25), "s", "rank_bm25", speed_target,
            note=f"<= 0.01 means >= 100x faster; rank_bm25 index build {build:.1f} s"),
        Row(LATENCY_SECTION, f"FTS5 backend vs rank_bm25 p95 {size}", p95(fts), p95(bm25), "s",
            "rank_bm25", speed_target),
    ]  # fmt: skip
