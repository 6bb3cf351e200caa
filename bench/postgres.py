"""8. Retrieval on PostgreSQL: its search backend against FTS5 on the same grown corpus.

Django picks the search backend by the connection's vendor and migrates per database, so
each backend is measured in a process of its own, ``python -m bench.postgres``, with
``DATABASE_URL`` naming the database (a throwaway SQLite file, or a throwaway PostgreSQL
database ``cited_answers_bench_<pid>`` created here and dropped at the end, also when
something fails). The child migrates, loads section 2b's grown corpus (the demo corpus
first, for hit@5), and prints ``bench.backend_search.measure()``'s JSON on stdout.

Figures: hit@5 on the demo questions for both, how many of FTS5's top 5 chunks the
PostgreSQL backend also returns, p50/p95 per search at 10k chunks (100k in full mode),
and the time to load the corpus (bulk insert, each database's own index triggers).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import services
from .report import Row, median, p95

SECTION = "8. retrieval on PostgreSQL vs FTS5"
REPO = Path(__file__).resolve().parent.parent
FTS5 = "FTS5 backend"


def _child(database_url: str, sizes: dict[str, int], reps: int) -> dict[str, Any]:
    spec = json.dumps({"sizes": sizes, "reps": reps})
    return services.child_json("bench.postgres", database_url, spec)


def _postgres_url(name: str) -> str:
    return urlsplit(services.POSTGRES_URL)._replace(path=f"/{name}").geturl()


@contextlib.contextmanager
def _database(suffix: str = "") -> Iterator[str]:
    """A fresh PostgreSQL database's URL, dropped afterwards whatever happens; ``suffix``
    tells apart several open at once."""
    from psycopg import sql

    name = f"cited_answers_bench_{os.getpid()}{suffix}"
    ident = sql.Identifier(name)
    admin = services.postgres_admin()  # Unavailable before anything is run
    try:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(ident))  # a reused pid
        admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        try:
            yield _postgres_url(name)
        finally:
            # FORCE: a child killed mid-query may still have its session open.
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    finally:
        admin.close()


def _agreement(fts: dict[str, Any], pg: dict[str, Any]) -> list[Row]:
    def hit_rate(result: dict[str, Any]) -> float:
        found = [h["expected"] in {title for title, _, _ in h["top"]} for h in result["hits"]]
        return sum(found) / len(found)

    common = total = 0
    differ = []
    score_gap, gap_question = 0.0, ""
    for mine, theirs in zip(pg["hits"], fts["hits"], strict=True):
        pg_top = {(t, o): s for t, o, s in mine["top"]}
        fts_top = {(t, o): s for t, o, s in theirs["top"]}
        shared = pg_top.keys() & fts_top.keys()
        common += len(shared)
        total += len(fts_top)
        gap = max((abs(pg_top[k] - fts_top[k]) for k in shared), default=0.0)
        if gap > score_gap:
            score_gap, gap_question = gap, mine["question"]
        if mine["top"][:1] and theirs["top"][:1] and mine["top"][0][0] != theirs["top"][0][0]:
            differ.append(f"{mine['question']!r}: {mine['top'][0][0]} vs {theirs['top'][0][0]}")
    count = len(pg["hits"])
    note = (
        f"{count} questions, {pg['demo_chunks']} chunks; largest score difference on a shared "
        f"chunk {score_gap:.4f} ({gap_question!r}); top document differs: "
        + ("; ".join(differ) or "never")
    )
    return [
        Row(SECTION, "hit@5, PostgreSQL backend", hit_rate(pg), hit_rate(fts), "", FTS5, None),
        Row(SECTION, "top-5 chunks shared with FTS5", common, total, "", "FTS5's top 5s",
            None, note=note),
    ]  # fmt: skip


def _latency(label: str, fts: dict[str, Any], pg: dict[str, Any]) -> list[Row]:
    mine, theirs = pg["sizes"][label], fts["sizes"][label]
    size = f"@{label} ({mine['chunks']:,} chunks)"
    if mine["chunks"] != theirs["chunks"]:
        size += f" vs {theirs['chunks']:,}"
    ingest_note = (
        f"{mine['chunks']:,} chunks in {mine['ingest_s']:.1f} s vs {theirs['ingest_s']:.1f} s; "
        f"then VACUUM ANALYZE {mine['maintain_s']:.1f} s (SQLite ANALYZE "
        f"{theirs['maintain_s']:.1f} s), before timing searches"
    )
    a, b = mine["latencies"], theirs["latencies"]
    return [
        Row(SECTION, f"PostgreSQL backend median {size}", median(a), median(b), "s", FTS5, None),
        Row(SECTION, f"PostgreSQL backend p95 {size}", p95(a), p95(b), "s", FTS5, None),
        Row(SECTION, f"load the corpus {size}", mine["ingest_s"], theirs["ingest_s"], "s",
            FTS5, None, note=ingest_note),
    ]  # fmt: skip


def run(folder: Path, *, full: bool) -> list[Row]:
    services.require_psycopg()
    sizes = {"10k": 10_000} | ({"100k": 100_000} if full else {})
    reps = 3
    with _database() as url:
        fts = _child(f"sqlite:///{folder / 'backend-search.sqlite3'}", sizes, reps)
        pg = _child(url, sizes, reps)
    rows = _agreement(fts, pg)
    rows[0] = replace(rows[0], note=f"{pg['server']}; {fts['server']}")
    for label in sizes:
        rows += _latency(label, fts, pg)
    return rows


def main() -> None:
    """The child: measure the backend of ``DATABASE_URL``; JSON on stdout."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    # After setup: the measuring module imports the models.
    from .backend_search import measure

    spec = json.loads(sys.argv[1])
    print(json.dumps(measure(spec["sizes"], spec["reps"])))


if __name__ == "__main__":
    main()
