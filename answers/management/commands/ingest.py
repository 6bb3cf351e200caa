"""Ingest files, folders or the Python language reference into the corpus."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from answers import services
from answers.conf import answers_settings
from answers.ingestion import ExtractionError, extract_file, iter_source_files

PYTHON_DOCS_URL = "https://docs.python.org/3/reference/"


def python_doc_topics() -> list[tuple[str, str]]:
    """``(topic, text)`` for each topic of the language reference shipped with Python."""
    from pydoc_data.topics import topics

    return sorted(topics.items())


class Command(BaseCommand):
    help = (
        "Ingest .md, .txt, .rst, .html and .pdf files and folders (unchanged files are "
        "skipped, changed ones re-chunked), or --python-docs for the demo corpus."
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
            items += [(f"python-docs:{topic}", topic) for topic, _ in python_doc_topics()]
        items += [(str(path.resolve()), path) for path in iter_source_files(paths)]
        if not items:
            raise CommandError(
                "No supported files found (.md .markdown .txt .rst .html .htm .pdf)."
            )

        docs = dict(python_doc_topics()) if options["python_docs"] else {}
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
                    title, body, url = item, docs[item], f"{PYTHON_DOCS_URL}#{item}"
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
        self.stdout.write(
            f"Ingested {len(items)} document(s): {counts['created']} created, "
            f"{counts['updated']} updated, {counts['unchanged']} unchanged, "
            f"{counts['failed']} failed; {chunks} chunk(s) written."
        )
        if counts["failed"] and counts["failed"] == len(items):
            raise CommandError("Every file failed to ingest.")
