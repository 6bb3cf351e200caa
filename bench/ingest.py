"""5. Ingestion throughput (chunks/s) against bare bulk_create of the same chunks."""

from __future__ import annotations

import io
import time
from pathlib import Path

from django.core.management import call_command

from answers.ingestion import extract_file, iter_source_files
from answers.management.commands.ingest import python_doc_topics
from answers.models import Chunk

from .corpus import SourceDocument, insert_documents, python_topics, source_document
from .db import Databases
from .report import Row

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
