"""``python -m bench``: run every section, print the table, write bench/results/latest.json.

Quick by default (about 12 minutes on 2 cores); ``BENCH_FULL=1`` adds the large sizes.
``python -m bench relay streaming`` (or ``make bench BENCH_ARGS="relay streaming"``) runs
only the sections whose name holds one of the words (the demo corpus is ingested whenever a
later section needs it). Section 12 (``BENCH_ARGS=documentation``: about 10,000 Debian
HTML pages ingested on each backend) runs only when named.
A section that breaks is reported and skipped: benchmarks print figures, they never fail.
Sections 7 (Redis part), 8, 9 (its PostgreSQL part) and 11 use the local Redis and
PostgreSQL (``bench.services``); without them they say why on stderr and are skipped.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

FULL = os.environ.get("BENCH_FULL", "").strip().lower() in {"1", "true", "yes", "on"}
RETRIEVAL_SIZES = {"10k": 10_000, "100k": 100_000} | ({"1M": 1_000_000} if FULL else {})


def _environment(folder: Path) -> Path:
    """Point Django at a throwaway database before anything imports the settings."""
    database = folder / "bench.sqlite3"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = f"sqlite:///{database}"
    # The developer's shell must not change what is measured.
    for name in (
        "ANSWERS_PROVIDER",
        "ANSWERS_MODEL",
        "DATABASE_CONN_MAX_AGE",
        "DATABASE_POOL_SIZE",
        "DJANGO_DEBUG",
    ):
        os.environ.pop(name, None)
    os.environ["ANSWERS_EXTRACTIVE_DELAY"] = "0"
    os.environ["DJANGO_LOG_LEVEL"] = "WARNING"
    return database


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    wanted = [word.lower() for word in argv]
    folder = Path(tempfile.mkdtemp(prefix="cited-answers-bench-"))
    try:
        database = _environment(folder)
        import django

        django.setup()
        from . import (
            citation_rules,
            corpus,
            ingest,
            pipeline,
            postgres,
            real_corpora,
            retrieval,
            scale_out,
            scoped_search,
            stream_relay,
            streaming,
            topk,
        )
        from .db import Databases
        from .report import Row, render_table, write_json
        from .services import Unavailable

        rows: list[Row] = []
        skipped: list[str] = []

        def section(
            name: str, run: Callable[[], list[Row]], *, needed: bool = False, named: bool = False
        ) -> None:
            # named: a long section that runs only when one of its words is asked for.
            asked = any(word in name.lower() for word in wanted)  # "PostgreSQL" too
            if (wanted or named) and not needed and not asked:
                return
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            try:
                rows.extend(run())
            except Unavailable as exc:
                print(f"[bench] {name} skipped: {exc}", file=sys.stderr)
                skipped.append(f"{name} ({exc})")
            except Exception:
                traceback.print_exc()
                skipped.append(name)
            print(f"[bench] {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)

        dbs = Databases(folder, database)
        dbs.migrate()
        section("citation rules", lambda: citation_rules.run(full=FULL))
        # The main database ends up holding the demo corpus, for sections 2a, 3, 4 and 6.
        section("ingest demo corpus", lambda: ingest.demo_corpus(dbs), needed=True)
        section("hit@5", retrieval.hit_at_5)
        section("queries per answer", pipeline.queries_per_answer)
        section("limits check growth", pipeline.limits_growth)
        section("time to references", pipeline.time_to_references)
        section("stream relay", stream_relay.run)
        section("streaming", lambda: streaming.run(dbs, folder / "daphne.log", full=FULL))
        section(
            "scale-out stack under load",
            lambda: scale_out.run(dbs, folder / "daphne-scale.log", full=FULL),
        )
        section("ingest files", lambda: ingest.files(dbs, folder / "files"))
        section("ingest html doc sets", lambda: ingest.html(dbs))
        section("ingest html doc sets into postgresql", lambda: ingest.html_postgres(folder))

        def grown_corpus() -> list[Row]:
            dbs.fresh("retrieval")
            documents = corpus.python_topics() + corpus.debian_docs()
            if corpus.debian_doc_root() is None:
                print("[bench] python3.11-doc not installed: Python topics only", file=sys.stderr)
            grown = corpus.ReplicatedCorpus(documents)
            out: list[Row] = []
            for label, size in RETRIEVAL_SIZES.items():
                grown.grow_to(size)
                big = size >= 1_000_000
                out += retrieval.latency(grown, label, reps=1 if big else 3, bm25_reps=1)
            return out

        section("retrieval latency", grown_corpus)
        section("retrieval on PostgreSQL", lambda: postgres.run(folder, full=FULL))
        section("scoped search", lambda: scoped_search.run(folder, full=FULL))
        section("bounded top-k at scale", lambda: topk.run(folder, full=FULL))
        section(
            "questions among real documentation",
            lambda: real_corpora.run(folder, full=FULL),
            named=True,
        )
        elapsed = time.perf_counter() - started
        # Sections ran in the order that shares databases best; print them by number.
        rows.sort(key=lambda row: row.section.split(" ", 1)[0])
        print()
        print(render_table(rows))
        if skipped:
            print(f"\nskipped (see stderr): {', '.join(skipped)}")
        meta = {
            "mode": "full" if FULL else "quick",
            "seconds": round(elapsed, 1),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "skipped": skipped,
        }
        path = write_json(rows, meta)
        print(f"\n{len(rows)} figures in {elapsed:.0f} s ({meta['mode']}); wrote {path}")
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
