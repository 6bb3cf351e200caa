"""5. Ingestion throughput: chunks/s against bare bulk_create of the same chunks, and the
Debian HTML doc sets end to end against a bare lxml parse of the same files."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import lxml.etree
from django.core.management import call_command

from answers.ingest_workers import ParseOptions, default_jobs, parse_files
from answers.ingestion import extract_file, iter_source_files
from answers.management.commands.ingest import python_doc_topics
from answers.models import Chunk

from .corpus import SourceDocument, insert_documents, python_topics, source_document
from .db import Databases
from .report import Row
from .services import Unavailable

SECTION = "5. ingestion throughput"
FILES = 1_000


def _ingest(*args: object, **options: object) -> tuple[int, float]:
    start = time.perf_counter()
    call_command("ingest", *args, no_progress=True, stdout=io.StringIO(), **options)
    return Chunk.objects.count(), time.perf_counter() - start


def _bulk(documents: list[SourceDocument]) -> tuple[int, float]:
    start = time.perf_counter()
    chunks = insert_documents([(d, d.title, d.key) for d in documents])
    return chunks, time.perf_counter() - start


def write_files(folder: Path, count: int = FILES) -> Path:
    """Real-text Markdown files, one Python reference topic per file, cycling."""
    folder.mkdir(parents=True, exist_ok=True)
    topics = python_doc_topics()
    for index in range(count):
        topic, text = topics[index % len(topics)].key, topics[index % len(topics)].text
        path = folder / f"{index:04d}-{topic}.md"
        path.write_text(f"# {topic} ({index})\n\n{text}\n", encoding="utf-8")
    return folder


def _file_documents(folder: Path) -> list[SourceDocument]:
    documents = []
    for path in iter_source_files([folder]):
        extracted = extract_file(path)
        documents.append(source_document(str(path.resolve()), extracted.title, extracted.body))
    return documents


def _row(figure: str, run: tuple[int, float], base: tuple[int, float]) -> Row:
    (chunks, elapsed), (base_chunks, base_elapsed) = run, base
    note = f"{chunks} chunks in {elapsed:.2f} s; bulk_create {base_chunks} in {base_elapsed:.2f} s"
    return Row(SECTION, figure, chunks / elapsed, base_chunks / base_elapsed, "chunks/s",
               "bulk_create", None, note=note)  # fmt: skip


def _best(runs: list[tuple[int, float]]) -> tuple[int, float]:
    return min(runs, key=lambda run: run[1])


def demo_corpus(dbs: Databases) -> list[Row]:
    """Best of three on fresh databases (a run is a fraction of a second); the last ingest
    goes into the main database, which then holds the demo corpus for later sections."""
    documents = python_topics()
    base = []
    for attempt in range(3):
        dbs.fresh(f"bulk-demo-{attempt}")
        base.append(_bulk(documents))
    runs = []
    for attempt in range(2):
        dbs.fresh(f"ingest-demo-{attempt}")
        runs.append(_ingest(python_docs=True))
    dbs.use(dbs.main)
    runs.append(_ingest(python_docs=True))
    return [_row("ingest --python-docs (demo corpus)", _best(runs), _best(base))]


def files(dbs: Databases, folder: Path) -> list[Row]:
    write_files(folder)
    documents = _file_documents(folder)
    base = []
    for attempt in range(3):
        dbs.fresh(f"bulk-files-{attempt}")
        base.append(_bulk(documents))
    dbs.fresh("ingest-files")
    return [_row(f"ingest of {FILES:,} .md files", _ingest(str(folder)), _best(base))]


# ------------------------------------------------------------- 5b. HTML doc sets

HTML_DOC_SETS = (
    Path("/usr/share/doc/python-django-doc/html"),
    Path("/usr/share/doc/python-pandas-doc/html"),
    Path("/usr/share/doc/python-scipy-doc/html"),
    Path("/usr/share/doc/postgresql-doc-15/html"),
)
HTML_PACKAGES = "python-django-doc python-pandas-doc python-scipy-doc postgresql-doc-15"
# Every 4th page of each set (sorted): about 2,500 pages of four generators, same every run.
HTML_EVERY = 4


def _cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the ingest workers)."""
    import resource

    return sum(
        getattr(resource.getrusage(who), field)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for field in ("ru_utime", "ru_stime")
    )


def html_pages() -> list[Path]:
    missing = [str(root) for root in HTML_DOC_SETS if not root.is_dir()]
    if missing:
        raise Unavailable(f"{', '.join(missing)} missing (apt-get install {HTML_PACKAGES})")
    return [page for root in HTML_DOC_SETS for page in sorted(root.rglob("*.html"))[::HTML_EVERY]]


def _bare_lxml(pages: list[Path]) -> float:
    """Read and parse every page with lxml, nothing else: the floor the issue compares to."""
    parser = lxml.etree.HTMLParser(remove_comments=True, remove_pis=True, recover=True)
    start = time.perf_counter()
    for page in pages:
        lxml.etree.fromstring(page.read_bytes(), parser)
    return time.perf_counter() - start


def _extract_only(pages: list[Path]) -> float:
    """Extraction and chunking in this process, no database (where the time goes)."""
    start = time.perf_counter()
    parse_files([str(page) for page in pages], ParseOptions(chunk_size=1200, stem=False))
    return time.perf_counter() - start


def html(dbs: Databases) -> list[Row]:
    """End-to-end ``ingest`` of the HTML doc sets, --jobs 1 and the default (one per core),
    against a bare lxml parse of the same files in the same run (the ratio is ingest's
    files/s over lxml's, on one core)."""
    pages = html_pages()
    paths = [str(page) for page in pages]
    bare = min(_bare_lxml(pages) for _ in range(2))
    extract = _extract_only(pages)
    rows: list[Row] = []
    jobs_default = default_jobs()
    for jobs in (1, jobs_default) if jobs_default > 1 else (1,):
        # Best of two, each on a fresh database: the machine is shared, one run can be unlucky.
        runs = []
        for attempt in range(2):
            dbs.fresh(f"ingest-html-{jobs}-{attempt}")
            cpu = _cpu_seconds()
            runs.append(_ingest(*paths, jobs=jobs))
            # CPU per page (all processes): what the run costs whatever else the machine runs.
            cpu_ms = 1000 * (_cpu_seconds() - cpu) / len(pages)
        chunks, elapsed = _best(runs)
        note = (
            f"{len(pages)} pages, {chunks} chunks in {elapsed:.1f} s = {chunks / elapsed:,.0f} "
            f"chunks/s, {len(pages) / elapsed:,.0f} files/s, {cpu_ms:.2f} ms CPU/page (last "
            f"run, all processes); bare lxml {bare:.2f} s "
            f"({1000 * bare / len(pages):.2f} ms/page), extraction+chunking in one process "
            f"{1000 * extract / len(pages):.2f} ms/page"
        )
        rows.append(Row(SECTION, f"ingest HTML doc sets, --jobs {jobs} (files/s)",
                        len(pages) / elapsed, len(pages) / bare, "files/s", "bare lxml",
                        None, note=note))  # fmt: skip
        rows.append(Row(SECTION, f"ingest HTML doc sets, --jobs {jobs} (chunks/s)",
                        chunks / elapsed, 2_000, "chunks/s", "issue 23 target",
                        (">=", 1.0), note=note))  # fmt: skip
        print(f"[bench] {note}", file=sys.stderr, flush=True)
    return rows


# The child that ingests into PostgreSQL: Django is set up for its own DATABASE_URL, and only
# the command itself is timed (not the interpreter's start or the migrations).
_PG_CHILD = """
import io, json, sys, time
import django
django.setup()
from django.core.management import call_command
from answers.models import Chunk
call_command("migrate", verbosity=0)
paths = open(sys.argv[1], encoding="utf-8").read().split("\\n")
start = time.perf_counter()
call_command("ingest", *paths, jobs=int(sys.argv[2]), no_progress=True, stdout=io.StringIO())
print(json.dumps([Chunk.objects.count(), time.perf_counter() - start]))
"""


def html_postgres(folder: Path) -> list[Row]:
    """The same pages into PostgreSQL with the default --jobs (a fresh database)."""
    import json
    import os
    import subprocess

    from .postgres import REPO, _database

    pages = html_pages()
    listing = folder / "html-pages.txt"
    listing.write_text("\n".join(str(page) for page in pages), encoding="utf-8")
    bare = min(_bare_lxml(pages) for _ in range(2))
    jobs = default_jobs()
    with _database() as url:
        env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
        done = subprocess.run(
            [sys.executable, "-c", _PG_CHILD, str(listing), str(jobs)],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            text=True, timeout=1800, check=True,
        )  # fmt: skip
    chunks, elapsed = json.loads(done.stdout.strip().splitlines()[-1])
    note = (
        f"PostgreSQL: {len(pages)} pages, {chunks} chunks in {elapsed:.1f} s; "
        f"bare lxml {bare:.2f} s"
    )
    print(f"[bench] {note}", file=sys.stderr, flush=True)
    return [
        Row(SECTION, f"ingest HTML doc sets into PostgreSQL, --jobs {jobs} (files/s)",
            len(pages) / elapsed, len(pages) / bare, "files/s", "bare lxml", None, note=note),
        Row(SECTION, f"ingest HTML doc sets into PostgreSQL, --jobs {jobs} (chunks/s)",
            chunks / elapsed, 2_000, "chunks/s", "issue 23 target", (">=", 1.0), note=note),
    ]  # fmt: skip
