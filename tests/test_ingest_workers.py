"""Parsing in worker processes (answers.ingest_workers) and the batch writer
(services.documents_ingest_batch): real files, real worker processes, the real database."""

from __future__ import annotations

import concurrent.futures
import io
import os
import signal
from pathlib import Path

import pytest
from django.core.management import call_command

from answers import ingest_workers, services
from answers.duplicates import body_signature
from answers.ingest_workers import ParsedFile, ParsePool, files_parse
from answers.ingestion import chunk_text, extract_file
from answers.models import Chunk, Document
from answers.registry import get_search_backend
from answers.search.stemming import stem_text, stems_known
from tests import documents
from tests.helpers import write

CHUNK_SIZE = 300


def html_page(index: int) -> str:
    """A small real-looking documentation page: chrome, a title, a few paragraphs."""
    paragraphs = "".join(
        f"<p>Page {index} paragraph {n}: the wombat café ({n}) grooms numbats for "
        f"the platypus tracker, {'and more words ' * 20 * (index % 7)}each day.</p>"
        for n in range(1 + index % 5)
    )
    return (
        f"<html><head><title>Page {index}</title></head><body>"
        f"<nav><a href='#'>Home</a> | <a href='#'>Next</a></nav>"
        f"<main><h1>Page {index}</h1>{paragraphs}</main></body></html>"
    )


@pytest.fixture
def pages(tmp_path: Path) -> list[Path]:
    return [
        write(tmp_path / "site" / f"page{index:03d}.html", html_page(index)) for index in range(40)
    ]


def parsed(paths: list[Path], *, jobs: int, stem: bool = False, **options: object) -> list:
    messages: list[str] = []
    found = list(
        files_parse(paths, jobs=jobs, chunk_size=CHUNK_SIZE, stem=stem, on_fallback=messages.append)
    )
    assert not messages, messages
    return found


# ---------------------------------------------------------------------------- workers


def test_workers_give_what_the_single_process_parse_gives_in_the_same_order(pages) -> None:
    alone = parsed(pages, jobs=1)
    pooled = parsed(pages, jobs=2)
    assert pooled == alone
    assert [item.key for item in pooled] == [str(path.resolve()) for path in pages]
    for item, path in zip(pooled, pages, strict=True):
        extracted = extract_file(path)
        assert (item.title, item.body) == (extracted.title, extracted.body)
        assert item.chunk_spans() == chunk_text(extracted.body, size=CHUNK_SIZE)


def test_stems_computed_in_workers_are_stem_texts_own(pages) -> None:
    for item in parsed(pages[:5], jobs=2, stem=True):
        known = item.known_stems()
        assert known[item.title] == stem_text(item.title)
        for span in item.chunk_spans():
            assert known[span.text] == stem_text(span.text)


def test_signatures_computed_in_workers_are_the_stored_ones(pages, db) -> None:  # type: ignore[no-untyped-def]
    for item in parsed(pages[:5], jobs=2):
        assert item.near_signature == body_signature(item.body)
    call_command("ingest", *map(str, pages[:5]), jobs=2, no_progress=True, stdout=io.StringIO())
    stored = Document.objects.filter(source_key__in=[str(p.resolve()) for p in pages[:5]])
    assert stored.count() == 5
    for document in stored:
        assert bytes(document.near_signature) == body_signature(document.body)
        assert document.near_signature


def test_a_broken_file_is_reported_and_the_others_parsed(tmp_path: Path, pages) -> None:
    broken = write(tmp_path / "site" / "page020x.html", b"\x00\x00 \n")
    found = parsed(sorted([*pages, broken]), jobs=2)
    bad = [item for item in found if item.error]
    assert [item.key for item in bad] == [str(broken.resolve())]
    assert bad[0].error
    assert len([item for item in found if not item.error]) == len(pages)


def test_a_path_not_valid_utf8_is_an_error_not_a_source_key(tmp_path: Path, pages) -> None:
    # Its lone surrogate would reach the database as the source key and fail the batch.
    undecodable = os.path.join(os.fsencode(tmp_path), b"caf\xe9.md")
    with open(undecodable, "wb") as handle:
        handle.write(b"# Cafe\n\nAbout coffee.\n")
    for jobs in (1, 2):
        found = parsed([Path(os.fsdecode(undecodable)), *pages[:3]], jobs=jobs)
        assert found[0].error == "its file name is not valid UTF-8; rename it"
        assert (found[0].body, found[0].spans) == ("", ())
        assert [bool(item.error) for item in found[1:]] == [False] * 3


def test_the_walk_is_read_lazily_with_a_bounded_window(pages) -> None:
    """Paths are pulled only as tasks are sent: never more than the window ahead."""
    pulled = 0

    def walk():
        nonlocal pulled
        for path in pages:
            pulled += 1
            yield path

    pool_size = 2
    window = pool_size * ingest_workers.TASKS_PER_WORKER
    with ParsePool(jobs=pool_size, chunk_size=CHUNK_SIZE, files_per_task=2) as pool:
        for count, _ in enumerate(pool.parse(walk()), start=1):
            assert pulled <= count + window * 2


def test_workers_killed_from_outside_have_their_files_parsed_again_in_new_ones(pages) -> None:
    messages: list[str] = []
    found: list[ParsedFile] = []
    with ParsePool(jobs=2, chunk_size=CHUNK_SIZE, files_per_task=1,
                   on_fallback=messages.append) as pool:  # fmt: skip
        for item in pool.parse(pages):
            if not found:
                for pid in pool.worker_pids():
                    os.kill(pid, signal.SIGKILL)
            found.append(item)
        assert pool.pooled
    assert len(messages) == 1
    assert "a worker process stopped" in messages[0]
    assert "parsed again one at a time in new worker processes" in messages[0]
    assert found == parsed(pages, jobs=1)


def test_a_file_that_crashes_its_worker_is_its_error_and_the_rest_are_parsed(
    pages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A native parser (PDFium) that segfaults on one file, or a file that gets its worker
    # killed for memory: the pool fell back to parsing in the command's own process, so the
    # same file then killed the command, and every file after it was left unread.
    command = os.getpid()
    real_extract = ingest_workers.extract_file

    def extract(path: Path) -> object:
        if path.name == "crash.html":
            if os.getpid() == command:
                raise RuntimeError("parsed in the command's process, which it would kill")
            os.kill(os.getpid(), signal.SIGSEGV)
        return real_extract(path)

    monkeypatch.setattr(ingest_workers, "extract_file", extract)
    crash = write(tmp_path / "site" / "crash.html", html_page(99))
    files = [*pages[:20], crash, *pages[20:]]
    messages: list[str] = []
    found = list(files_parse(files, jobs=2, chunk_size=CHUNK_SIZE, on_fallback=messages.append))
    assert [item.key for item in found] == [str(path.resolve()) for path in files]
    assert found[20].error.startswith("its parser crashed (BrokenProcessPool: ")
    assert "\n" not in found[20].error
    assert found[:20] + found[21:] == parsed(pages, jobs=1)
    assert len(messages) == 1 and "parsed again one at a time" in messages[0]


def test_a_file_that_needs_more_memory_than_a_worker_may_take_fails_alone(
    pages, tmp_path: Path
) -> None:
    # A 0.5 MB PDF whose content stream inflates to 512 MB: PDFium took 1 GB for it. On a
    # shared server the kernel's OOM killer picks its own victim (the database, say); a
    # worker's address space is capped instead, and the file fails on its own.
    bomb = write(tmp_path / "site" / "bomb.pdf", documents.pdf_flate_bomb_bytes(size=512 << 20))
    files = [*pages[:3], bomb, *pages[3:]]
    messages: list[str] = []
    with ParsePool(jobs=2, chunk_size=CHUNK_SIZE, memory_limit=256 << 20,
                   on_fallback=messages.append) as pool:  # fmt: skip
        found = list(pool.parse(files))
    assert found[3].key == str(bomb.resolve())
    assert found[3].error.startswith("its parser crashed (")
    assert found[:3] + found[4:] == parsed(pages, jobs=1)
    small = write(tmp_path / "small.pdf", documents.pdf_flate_bomb_bytes(size=8 << 20))
    with ParsePool(jobs=2, chunk_size=CHUNK_SIZE, memory_limit=256 << 20) as pool:
        assert [item.body for item in pool.parse([small])] == ["Behind the blanks"]


def test_a_pool_that_cannot_start_parses_here(pages, monkeypatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(38, "Function not implemented")

    # The edge we do not own: the OS refusing processes (no /dev/shm, a seccomp sandbox).
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    monkeypatch.setattr(ingest_workers, "ProcessPoolExecutor", refuse)
    messages: list[str] = []
    found = list(files_parse(pages, jobs=2, chunk_size=CHUNK_SIZE, on_fallback=messages.append))
    assert len(messages) == 1 and "cannot start 2 worker processes" in messages[0]
    assert found == parsed(pages, jobs=1)


# ---------------------------------------------------------------------- batch writes


def source(key: str, title: str, body: str) -> services.DocumentSource:
    return services.DocumentSource(source_key=key, title=title, body=body)


@pytest.mark.django_db
def test_a_batch_writes_what_one_by_one_writes() -> None:
    bodies = {f"b:{n}": f"Batch body {n} about quokkas.\n\n" + "More text. " * 60 * n
              for n in range(1, 6)}  # fmt: skip
    results = services.documents_ingest_batch(
        sources=[source(key, f"Title {key}", body) for key, body in bodies.items()],
        chunk_size=CHUNK_SIZE,
    )
    assert [r.outcome for r in results] == ["created"] * 5
    for result, (key, body) in zip(results, bodies.items(), strict=True):
        document = Document.objects.get(source_key=key)
        assert result.document.pk == document.pk
        assert document.body == body
        spans = chunk_text(body, size=CHUNK_SIZE)
        assert result.chunks == len(spans)
        stored = list(document.chunks.order_by("ordinal").values_list("start", "end", "text"))
        assert stored == [(s.start, s.end, s.text) for s in spans]
    hits = get_search_backend().search("quokkas", limit=10)
    assert len({Chunk.objects.get(pk=h.chunk_id).document_id for h in hits}) == 5


@pytest.mark.django_db
def test_a_batch_skips_unchanged_and_replaces_changed_documents() -> None:
    services.documents_ingest_batch(
        sources=[source("b:same", "Same", "Snorkelwort grows here."),
                 source("b:edit", "Edit", "Bramblequat grows here.")],
        chunk_size=CHUNK_SIZE,
    )  # fmt: skip
    same = Document.objects.get(source_key="b:same")
    same_chunks = list(same.chunks.values_list("pk", flat=True))
    results = services.documents_ingest_batch(
        sources=[source("b:same", "Same", "Snorkelwort grows here."),
                 source("b:edit", "Edit", "Thistlewhump grows here."),
                 source("b:new", "New", "Gorsewhistle grows here.")],
        chunk_size=CHUNK_SIZE,
    )  # fmt: skip
    assert [(r.outcome, r.chunks) for r in results] == [
        ("unchanged", 1), ("updated", 1), ("created", 1)
    ]  # fmt: skip
    assert list(same.chunks.values_list("pk", flat=True)) == same_chunks
    search = get_search_backend()
    assert search.search("bramblequat", limit=5) == []
    for word, key in (("thistlewhump", "b:edit"), ("gorsewhistle", "b:new")):
        (hit,) = search.search(word, limit=5)
        assert Chunk.objects.get(pk=hit.chunk_id).document.source_key == key


@pytest.mark.django_db
def test_a_batch_failing_on_a_unique_source_key_is_written_one_by_one(monkeypatch) -> None:
    """A row with one of the batch's keys appears after the batch looked (as when another
    writer creates it): the unique source key fails the whole batch, which is rolled back
    (the row with it, here, as it was made in the same transaction), and each document is
    then written on its own by document_ingest."""
    real_bulk_create = Document.objects.bulk_create

    def racing_bulk_create(documents, *args, **kwargs):
        # The row appears just before this batch inserts.
        Document.objects.create(source_key="b:raced", title="Raced", body="Other text.",
                                content_hash="x")  # fmt: skip
        monkeypatch.setattr(Document.objects, "bulk_create", real_bulk_create)
        return real_bulk_create(documents, *args, **kwargs)

    monkeypatch.setattr(Document.objects, "bulk_create", racing_bulk_create)
    results = services.documents_ingest_batch(
        sources=[source("b:first", "First", "Wallaby text."),
                 source("b:raced", "Raced", "Pademelon text.")],
        chunk_size=CHUNK_SIZE,
    )  # fmt: skip
    assert [(r.outcome, r.chunks) for r in results] == [("created", 1), ("created", 1)]
    raced = Document.objects.get(source_key="b:raced")
    assert (raced.body, raced.chunks.get().text) == ("Pademelon text.", "Pademelon text.")
    assert Document.objects.filter(source_key__startswith="b:").count() == 2


@pytest.mark.django_db
def test_index_triggers_use_stems_the_workers_computed() -> None:
    """On SQLite the triggers stem in this process unless the stems are known; with a
    deliberately different known stem, the index holds the known one (it was used)."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the SQLite triggers stem in Python")
    body = "Numbats forage termites."
    with stems_known({body: stem_text("wombat")}):
        services.documents_ingest_batch(
            sources=[source("b:stems", "Stems", body)], chunk_size=CHUNK_SIZE
        )
    assert get_search_backend().search("wombat", limit=5)
    assert get_search_backend().search("termites", limit=5) == []
