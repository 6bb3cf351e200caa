"""Ingest files, folders or the Python language reference into the corpus."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from tqdm import tqdm

from answers import services
from answers.conf import answers_settings
from answers.ingest_workers import FILES_PER_TASK, ParsedFile, ParsePool, default_jobs
from answers.ingestion import (
    SUPPORTED_SUFFIXES,
    SkippedFile,
    chunk_text,
    scan_source_files,
    shown_path,
)
from answers.markup import pydoc_to_markdown
from answers.models import Document
from answers.search.stemming import stems_known

PYTHON_DOCS_URL = "https://docs.python.org/3/"

# The page of the Python docs each pydoc topic is on. A topic key is the Sphinx label of
# its section (pydoc_data is generated from those labels), and Sphinx writes each label
# as an anchor on that page, so ``page#key`` lands on the section itself.
_TOPIC_PAGES = {
    "reference/simple_stmts.html": (
        "assert assignment augassign break continue del global import nonlocal pass raise "
        "return yield"
    ),
    "reference/compound_stmts.html": "async class compound else for function if try while with",
    "reference/expressions.html": (
        "atom-identifiers atom-literals attribute-references await binary bitwise booleans "
        "calls comparisons conversions dict exprlists in lambda lists operator-summary power "
        "shifting slicings subscriptions unary"
    ),
    "reference/datamodel.html": (
        "attribute-access callable-types context-managers customization numeric-types "
        "objects sequence-types specialnames types"
    ),
    "reference/lexical_analysis.html": (
        "floating id-classes identifiers imaginary integers numbers strings"
    ),
    "reference/executionmodel.html": "dynamic-features exceptions execmodel naming",
    "library/stdtypes.html": (
        "bltin-code-objects bltin-ellipsis-object bltin-null-object bltin-type-objects "
        "specialattrs string-methods truth typesfunctions typesmapping typesmethods "
        "typesmodules typesseq typesseq-mutable"
    ),
    "library/string.html": "formatstrings",
    "library/pdb.html": "debugger",
}
TOPIC_PAGES = {key: page for page, keys in _TOPIC_PAGES.items() for key in keys.split()}


@dataclass(frozen=True)
class PythonDocTopic:
    key: str
    title: str
    text: str
    url: str


def python_doc_title(text: str) -> str:
    """A topic's own heading (its first line), without pydoc's quotes around code:
    'The "if" statement' reads 'The if statement'."""
    first = text.strip().split("\n", 1)[0]
    return " ".join(first.replace('"', " ").split())


def python_doc_url(key: str) -> str:
    """The topic's section in the Python docs (the reference index for an unknown key)."""
    page = TOPIC_PAGES.get(key)
    return f"{PYTHON_DOCS_URL}{page}#{key}" if page else f"{PYTHON_DOCS_URL}reference/"


def python_doc_topics() -> list[PythonDocTopic]:
    """Each topic of the language reference shipped with Python, once per text: pydoc
    files one section under several keys ("if" and "else"), and two sources quoting the
    same section would show the same excerpt twice."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    found: list[PythonDocTopic] = []
    # A key with a page first, then the shortest ("if" before "else").
    for key, text in sorted(
        topics.items(), key=lambda kv: (kv[0] not in TOPIC_PAGES, len(kv[0]), kv[0])
    ):
        if text in seen:
            continue
        seen.add(text)
        # The body is Markdown like every other document's (ADR 0026); the title is read
        # from pydoc's own first line.
        body = pydoc_to_markdown(text)
        found.append(PythonDocTopic(key, python_doc_title(text), body, python_doc_url(key)))
    return sorted(found, key=lambda topic: topic.key)


class Command(BaseCommand):
    help = (
        "Ingest .md, .txt, .rst, .html, .pdf, .docx, .pptx and .xlsx files and folders "
        "(unchanged files are skipped, changed ones re-chunked; other files are reported, "
        "each listed with --verbosity 2), or --python-docs for the demo corpus."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # str, not Path: Path("") is ".", so an empty argument would ingest the current folder.
        parser.add_argument("paths", nargs="*", help="Files or folders.")
        parser.add_argument(
            "--python-docs",
            action="store_true",
            help="Ingest the Python language reference topics (pydoc_data.topics).",
        )
        parser.add_argument(
            "--group",
            help="Restrict the ingested documents to members of this group (created if missing).",
        )
        parser.add_argument(
            "--jobs",
            type=int,
            default=None,
            help="Worker processes that parse files (default: one per core; 1: none).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.writer: _BatchWriter | None = None
        try:
            self._ingest(options)
        except KeyboardInterrupt:
            # Ctrl-C, wherever it comes: every batch is written whole or not at all (a batch
            # being written when it came was finished first), so the count is exact and a
            # second run skips what is stored as unchanged.
            counts = self.writer.counts if self.writer else dict.fromkeys(_OUTCOMES, 0)
            raise CommandError(
                f"Interrupted: {sum(counts.values())} document(s) stored so far "
                f"({counts['created']} created, {counts['updated']} updated, "
                f"{counts['unchanged']} unchanged), the rest not read or not written; "
                "run the same command again to finish.",
                returncode=130,
            ) from None

    def _ingest(self, options: dict[str, Any]) -> None:
        given: list[str] = [os.fspath(path) for path in options["paths"]]
        if not given and not options["python_docs"]:
            raise CommandError("Give at least one PATH, or --python-docs.")
        if any(not path for path in given):
            raise CommandError(
                "An empty PATH was given (an unset variable?); nothing was ingested."
            )
        paths = [Path(path) for path in given]
        # A broken symbolic link, or a path that cannot be reached, is reported with the
        # files that cannot be read.
        missing = [shown_path(p) for p in paths if _missing(p)]
        if missing:
            raise CommandError(f"No such file or folder: {', '.join(missing)}")
        jobs = default_jobs() if options["jobs"] is None else int(options["jobs"])
        if jobs < 1:
            raise CommandError("--jobs must be at least 1.")
        group_name = ""
        # "is not None": `--group ""` (an unset variable) must not ingest open to everyone.
        if options["group"] is not None:
            name = options["group"].strip()
            if not name:
                raise CommandError("--group needs a name.")
            # Checked here: PostgreSQL refused a longer name with a DataError traceback,
            # SQLite stored it whole.
            limit = Group._meta.get_field("name").max_length
            if limit is not None and len(name) > limit:
                raise CommandError(
                    f"--group NAME can be at most {limit} characters long; this one has "
                    f"{len(name)}."
                )
            group_name = name

        topics = python_doc_topics() if options["python_docs"] else []
        # Paths only (a few hundred bytes each): the files themselves are read by the workers,
        # a bounded window at a time.
        sources, unsupported, unreadable = scan_source_files(
            paths, max_key_length=Document._meta.get_field("source_key").max_length
        )
        verbosity = int(options.get("verbosity", 1))
        # Paths that cannot be read count as files that failed, reported the same way.
        for item in unreadable:
            self.stderr.write(f"Skipped {shown_path(item.path.absolute())}: {item.reason}")
        total = len(topics) + len(sources) + len(unreadable)
        if not total:
            self._report_unsupported(unsupported, verbosity=max(verbosity, 2))
            raise CommandError(
                f"No supported files found ({' '.join(sorted(SUPPORTED_SUFFIXES))})."
            )
        # Made only now: a run that finds nothing to ingest leaves no empty group behind.
        group = Group.objects.get_or_create(name=group_name)[0] if group_name else None

        chunk_size = int(answers_settings.CHUNK_SIZE)
        # No more workers than tasks: a handful of files is parsed here, without a pool.
        jobs = max(1, min(jobs, -(-len(sources) // FILES_PER_TASK)))
        # On SQLite the index triggers stem each chunk in this process: let the workers do it.
        stem = connection.vendor == "sqlite" and jobs > 1
        writer = self.writer = _BatchWriter(group=group, chunk_size=chunk_size)
        writer.failed = len(unreadable)
        show_progress = not options["no_progress"] and sys.stderr.isatty()
        progress = tqdm(
            total=total, initial=len(unreadable), desc="Ingesting", unit="file",
            disable=not show_progress,
            file=sys.stderr, postfix="0 files/s, 0 chunks/s",
            # Our own rates in place of tqdm's: files and chunks over the whole run.
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
            "[{elapsed}<{remaining}{postfix}]",
        )  # fmt: skip
        started = time.perf_counter()

        def advance(files: int) -> None:
            progress.update(files)
            elapsed = max(time.perf_counter() - started, 1e-9)
            progress.set_postfix_str(
                f"{progress.n / elapsed:.0f} files/s, {writer.chunks / elapsed:.0f} chunks/s",
                refresh=False,
            )

        def fallback(message: str) -> None:
            progress.clear()
            self.stderr.write(f"Ingest: {message}")

        with (
            _Interruption() as interruption,
            progress,
            ParsePool(
                jobs=jobs,
                chunk_size=chunk_size,
                stem=stem,
                on_fallback=fallback,
                memory_limit=int(answers_settings.INGEST_WORKER_MEMORY_MB) * 1024 * 1024,
            ) as pool,
        ):
            writer.deferred = interruption.deferred
            for parsed in _sources(topics, pool.parse(sources), chunk_size=chunk_size):
                if parsed.error:
                    writer.failed += 1
                    progress.clear()
                    self.stderr.write(f"Skipped {shown_path(parsed.key)}: {parsed.error}")
                else:
                    writer.add(parsed)
                advance(1)
            writer.flush()
        counts = writer.counts
        if counts["created"] or counts["updated"]:
            services.search_index_maintain()
        self.stdout.write(
            f"Ingested {total} document(s): {counts['created']} created, "
            f"{counts['updated']} updated, {counts['unchanged']} unchanged, "
            f"{writer.failed} failed; {writer.chunks} chunk(s) written."
        )
        self._report_unsupported(unsupported, verbosity=verbosity)
        if writer.failed and writer.failed == total:
            raise CommandError("Every file failed to ingest.")

    def _report_unsupported(self, skipped: list[SkippedFile], *, verbosity: int) -> None:
        """One line with the count by type; each file too from --verbosity 2."""
        if not skipped or verbosity < 1:
            return
        by_type: dict[str, int] = {}
        for item in skipped:
            kind = item.path.suffix.lower() or "(no extension)"
            by_type[kind] = by_type.get(kind, 0) + 1
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(by_type.items()))
        self.stdout.write(
            f"Skipped {len(skipped)} file(s) of unsupported types ({kinds}); supported: "
            f"{' '.join(sorted(SUPPORTED_SUFFIXES))}."
        )
        if verbosity >= 2:
            for item in skipped:
                self.stdout.write(f"Skipped {shown_path(item.path.resolve())}: {item.reason}")


def _missing(path: Path) -> bool:
    """Whether nothing is at ``path`` (not: whether it cannot be reached, EACCES)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


@dataclass(frozen=True)
class _Parsed:
    """A document ready to write: the source, and its stems if a worker computed them."""

    source: services.DocumentSource | None  # None: the file could not be read
    stems: dict[str, str]
    error: str = ""
    key: str = ""


def _sources(
    topics: list[PythonDocTopic], files: Iterator[ParsedFile], *, chunk_size: int
) -> Iterator[_Parsed]:
    for topic in topics:
        source = services.DocumentSource(
            source_key=f"python-docs:{topic.key}", title=topic.title, body=topic.text,
            url=topic.url, spans=chunk_text(topic.text, size=chunk_size),
        )  # fmt: skip
        yield _Parsed(source=source, stems={})
    for parsed in files:
        if parsed.error:
            yield _Parsed(source=None, stems={}, error=parsed.error, key=parsed.key)
            continue
        source = services.DocumentSource(
            source_key=parsed.key, title=parsed.title, body=parsed.body,
            spans=parsed.chunk_spans(), near_signature=parsed.near_signature,
        )  # fmt: skip
        yield _Parsed(source=source, stems=parsed.known_stems())


_OUTCOMES = ("created", "updated", "unchanged")


class _Interruption:
    """Ctrl-C (SIGINT) during a ``deferred`` block takes effect when the block ends: a
    batch's transaction commits and is counted, or it is not begun. Anywhere else it
    interrupts at once, as usual. Only in the main thread, and only if SIGINT has Python's
    own handler (not when it is ignored, as in a shell's background job)."""

    def __init__(self) -> None:
        self.requested = False
        self.deferring = False
        self.previous: Any = None

    def __enter__(self) -> _Interruption:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.deferring:
            self.requested = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.requested:
            raise KeyboardInterrupt


class _BatchWriter:
    """Collects parsed documents and writes them in batches (services.documents_ingest_batch)."""

    def __init__(self, *, group: Group | None, chunk_size: int) -> None:
        self.group, self.chunk_size = group, chunk_size
        # Around each batch's write and count: see _Interruption.
        self.deferred: Callable[[], contextlib.AbstractContextManager[None]] = (
            contextlib.nullcontext
        )
        self.pending: list[_Parsed] = []
        self.pending_chunks = 0
        self.counts = dict.fromkeys(_OUTCOMES, 0)
        self.chunks = 0  # written
        self.failed = 0

    def add(self, parsed: _Parsed) -> None:
        """Queue one document; a full batch is written at once."""
        assert parsed.source is not None
        self.pending.append(parsed)
        self.pending_chunks += len(parsed.source.spans or ())
        if (
            len(self.pending) >= services.INGEST_BATCH_DOCUMENTS
            or self.pending_chunks >= services.INGEST_BATCH_CHUNKS
        ):
            self.flush()

    def flush(self) -> None:
        batch, self.pending, self.pending_chunks = self.pending, [], 0
        if not batch:
            return
        stems: dict[str, str] = {}
        for parsed in batch:
            stems.update(parsed.stems)
        with self.deferred(), stems_known(stems):
            results = services.documents_ingest_batch(
                sources=[parsed.source for parsed in batch if parsed.source is not None],
                group=self.group,
                chunk_size=self.chunk_size,
            )
            for result in results:
                self.counts[result.outcome] += 1
                self.chunks += result.chunks if result.outcome != "unchanged" else 0
