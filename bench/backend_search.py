"""One search backend on the database Django is configured with, for section 8.

``measure()`` runs in a process of its own (``python -m bench.postgres``), once on a
SQLite file (FTS5) and once on a PostgreSQL database, so both backends go through the
same code, the same corpus and the same kind of process. It answers plain data (JSON).
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.db import connection

from answers.models import Chunk
from answers.registry import get_search_backend

from .corpus import ReplicatedCorpus, chunk_count, debian_docs, python_topics
from .questions import HIT_QUESTIONS
from .retrieval import LIMIT, _latencies  # the timing of section 2b, question by question


def _maintain() -> float:
    """What a deployment does after a bulk load, done at once: what ``manage.py ingest``
    ends with (``services.search_index_maintain``: on PostgreSQL the statistics ledger's
    dead rows vacuumed and the GIN pending list merged; without it a 1M load's ledger
    cost 156 ms a question), then what the database does on its own later. PostgreSQL:
    VACUUM ANALYZE (planner statistics; autovacuum would do it later, and may be off).
    SQLite: ANALYZE."""
    from answers.services import search_index_maintain

    start = time.perf_counter()
    search_index_maintain()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE answers_chunk")
            cursor.execute("VACUUM ANALYZE answers_document")
        else:
            cursor.execute("ANALYZE")
    return time.perf_counter() - start


def _top5(backend: Any) -> list[dict[str, Any]]:
    """Each hit question's top 5 as (title, ordinal, score): comparable across databases."""
    out = []
    for question, expected in HIT_QUESTIONS:
        hits = backend.search(question, limit=5)
        found = dict(
            (pk, (title, ordinal))
            for pk, title, ordinal in Chunk.objects.filter(
                pk__in=[hit.chunk_id for hit in hits]
            ).values_list("pk", "document__title", "ordinal")
        )
        top = [[*found[hit.chunk_id], round(hit.score, 6)] for hit in hits]
        out.append({"question": question, "expected": expected, "top": top})
    return out


def _server() -> str:
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT sqlite_version()")
            return f"SQLite {cursor.fetchone()[0]}"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
        cursor.execute("SHOW lc_ctype")
        ctype = cursor.fetchone()[0]
    return f"PostgreSQL {version}, LC_CTYPE {ctype}"


def measure(sizes: dict[str, int], reps: int) -> dict[str, Any]:
    start = time.perf_counter()
    call_command("migrate", verbosity=0)
    migrate = time.perf_counter() - start
    backend = get_search_backend()
    topics = python_topics()
    grown = ReplicatedCorpus(topics + debian_docs())
    # Copy 1 of the Python topics first: exactly the demo corpus of section 2a, for hit@5.
    start = time.perf_counter()
    grown.grow_to(chunk_count(topics))
    ingest = time.perf_counter() - start
    demo_chunks = grown.chunks
    _maintain()
    hits = _top5(backend)
    results: dict[str, Any] = {}
    for label, size in sizes.items():
        start = time.perf_counter()
        grown.grow_to(size)
        ingest += time.perf_counter() - start
        maintain = _maintain()
        latencies = _latencies({"search": lambda q: backend.search(q, limit=LIMIT)}, reps)
        results[label] = {
            "chunks": grown.chunks,
            "ingest_s": ingest,  # from empty to this size (bulk insert, index triggers)
            "maintain_s": maintain,
            "latencies": latencies["search"],
        }
    return {
        "backend": backend.name,
        "server": _server(),
        "migrate_s": migrate,
        "demo_chunks": demo_chunks,
        "hits": hits,
        "sizes": results,
    }
