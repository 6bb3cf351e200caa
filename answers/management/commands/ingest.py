"""Ingest files, folders or the Python language reference into the corpus."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from answers import services
from answers.conf import answers_settings
from answers.ingestion import (
    SUPPORTED_SUFFIXES,
    ExtractionError,
    SkippedFile,
    extract_file,
    scan_source_files,
)
from answers.markup import pydoc_to_markdown

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
        parser.add_argument("paths", nargs="*", type=Path, help="Files or folders.")
        parser.add_argument(
            "--python-docs",
            action="store_true",
            help="Ingest the Python language reference topics (pydoc_data.topics).",
        )
        parser.add_argument(
            "--group",
            help="Restrict the ingested documents to members of this group (created if missing).",
        )
        parser.add_argument("--no-progress", action="store_true", help="No progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        paths: list[Path] = options["paths"]
        if not paths and not options["python_docs"]:
            raise CommandError("Give at least one PATH, or --python-docs.")
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise CommandError(f"No such file or folder: {', '.join(missing)}")
        group = None
        if options["group"]:
            name = options["group"].strip()
            if not name:
                raise CommandError("--group needs a name.")
            group, _ = Group.objects.get_or_create(name=name)

        items: list[tuple[str, Any]] = []
        if options["python_docs"]:
            items += [(f"python-docs:{t.key}", t) for t in python_doc_topics()]
        sources, unsupported = scan_source_files(paths)
        items += [(str(path.resolve()), path) for path in sources]
        verbosity = int(options.get("verbosity", 1))
        if not items:
            self._report_unsupported(unsupported, verbosity=max(verbosity, 2))
            raise CommandError(
                f"No supported files found ({' '.join(sorted(SUPPORTED_SUFFIXES))})."
            )

        counts = {"created": 0, "updated": 0, "unchanged": 0, "failed": 0}
        chunks = 0
        chunk_size = int(answers_settings.CHUNK_SIZE)
        show_progress = not options["no_progress"] and sys.stderr.isatty()
        for key, item in tqdm(
            items, desc="Ingesting", unit="doc", disable=not show_progress, file=sys.stderr
        ):
            try:
                if isinstance(item, Path):
                    extracted = extract_file(item)
                    title, body, url = extracted.title, extracted.body, ""
                else:
                    title, body, url = item.title, item.text, item.url
                result = services.document_ingest(
                    source_key=key, title=title, body=body, url=url, group=group,
                    chunk_size=chunk_size,
                )  # fmt: skip
            except ExtractionError as exc:
                counts["failed"] += 1
                self.stderr.write(f"Skipped {key}: {exc}")
                continue
            except OSError as exc:
                counts["failed"] += 1
                self.stderr.write(f"Skipped {key}: cannot read it ({exc.strerror or exc})")
                continue
            counts[result.outcome] += 1
            chunks += result.chunks if result.outcome != "unchanged" else 0
        if counts["created"] or counts["updated"]:
            services.search_index_maintain()
        self.stdout.write(
            f"Ingested {len(items)} document(s): {counts['created']} created, "
            f"{counts['updated']} updated, {counts['unchanged']} unchanged, "
            f"{counts['failed']} failed; {chunks} chunk(s) written."
        )
        self._report_unsupported(unsupported, verbosity=verbosity)
        if counts["failed"] and counts["failed"] == len(items):
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
                self.stdout.write(f"Skipped {item.path.resolve()}: {item.reason}")
