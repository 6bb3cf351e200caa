"""Real documents for the benchmarks, and fast ways to load many copies of them.

The corpus grows by replicating WHOLE documents (each copy with a distinct title
suffix), never by reshuffling sentences, so term statistics stay those of real text.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from answers.ingestion import (
    ChunkSpan,
    ExtractionError,
    chunk_text,
    content_hash,
    extract_text,
    quiet_libraries,
)
from answers.management.commands.ingest import python_doc_topics
from answers.models import Chunk, Document

CHUNK_SIZE = 1200  # the app's default ANSWERS["CHUNK_SIZE"]
# Debian's python3.11-doc ships the reST sources of the whole documentation.
DEBIAN_DOC_ROOTS = (
    Path("/usr/share/doc/python3.11/html/_sources"),
    Path("/usr/share/doc/python3.11-doc/html/_sources"),
)
# The same split as FTS5's unicode61 tokenizer (and answers.search.base).
_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class SourceDocument:
    key: str
    title: str
    body: str
    url: str
    spans: tuple[ChunkSpan, ...]
    digest: str


def source_document(key: str, title: str, body: str, url: str = "") -> SourceDocument:
    spans = tuple(chunk_text(body, size=CHUNK_SIZE))
    return SourceDocument(key, title, body, url, spans, content_hash(body))


def python_topics() -> list[SourceDocument]:
    """The demo corpus: one document per language reference topic."""
    return [
        # Titled by key: the benchmark's labelled questions name topics by key.
        source_document(f"python-docs:{t.key}", t.key, t.text, t.url)
        for t in python_doc_topics()
    ]


def debian_doc_root() -> Path | None:
    return next((root for root in DEBIAN_DOC_ROOTS if root.is_dir()), None)


def debian_docs() -> list[SourceDocument]:
    """The reST sources of python3.11-doc, if installed (``apt-get install python3.11-doc``)."""
    root = debian_doc_root()
    if root is None:
        return []
    documents = []
    for path in sorted(root.rglob("*.txt")):
        try:
            extracted = extract_text(
                data=path.read_bytes(), suffix=".rst", fallback_title=path.stem
            )
        except ExtractionError:
            continue  # a few include files are empty
        key = f"debian-doc:{path.relative_to(root)}"
        documents.append(source_document(key, extracted.title, extracted.body))
    return documents


def chunk_count(documents: list[SourceDocument]) -> int:
    return sum(len(d.spans) for d in documents)


def insert_documents(documents: list[tuple[SourceDocument, str, str]]) -> int:
    """Insert ``(document, title, source_key)`` rows and their chunks with two bulk_creates.

    The FTS5 index is filled by the chunk insert trigger, as for any other write.
    """
    with transaction.atomic():
        rows = Document.objects.bulk_create(
            [
                Document(
                    title=title,
                    source_key=key,
                    url=d.url,
                    body=d.body,
                    content_hash=d.digest,
                    chunk_count=len(d.spans),
                )
                for d, title, key in documents
            ],
            batch_size=500,
        )
        chunks = [
            Chunk(document=row, ordinal=s.ordinal, text=s.text, start=s.start, end=s.end)
            for row, (d, _, _) in zip(rows, documents, strict=True)
            for s in d.spans
        ]
        Chunk.objects.bulk_create(chunks, batch_size=500)
    return len(chunks)


def replica_title(document: SourceDocument, copy: int) -> str:
    return document.title if copy == 1 else f"{document.title} (copy {copy})"


class ReplicatedCorpus:
    """Copies 1, 2, 3, ... of every document, inserted until the index holds ``target`` chunks."""

    BATCH = 200

    def __init__(self, documents: list[SourceDocument]) -> None:
        self.documents = documents
        self.chunks = 0
        # Inserted (document, copy) pairs, in order: what rank_bm25 must index too.
        self.inserted: list[tuple[SourceDocument, int]] = []
        self._pending: Iterator[tuple[int, SourceDocument]] = (
            (copy, document) for copy in itertools.count(1) for document in documents
        )

    def grow_to(self, target: int) -> None:
        while self.chunks < target:
            batch: list[tuple[SourceDocument, int]] = []
            planned = self.chunks
            while planned < target and len(batch) < self.BATCH:
                copy, document = next(self._pending)
                batch.append((document, copy))
                planned += len(document.spans)
            self.chunks += insert_documents(
                [(d, replica_title(d, copy), f"bench:{copy}:{d.key}") for d, copy in batch]
            )
            self.inserted += batch


# Section 2c: real, varied documentation installed from Debian packages (bench set-up:
# ``apt-get install -y python3.11-doc python-django-doc manpages manpages-dev``).
DJANGO_DOC_ROOT = Path("/usr/share/doc/python-django-doc/html")
MAN_ROOT = Path("/usr/share/man")
_ROFF_ESCAPE = re.compile(r"\\(?:f(?:\[[^\]]*\]|\(..|.)|s[-+]?\d|\(..|\[[^\]]*\]|[&|^,/%:~0-]|.)")
_ROFF_MACRO = re.compile(r"^\.\s*[A-Za-z]{1,3}\b\s*")


def roff_text(source: str) -> str:
    """A man page's roff source as plain text: macros and font escapes dropped, their
    words kept (what ``man`` would print, without its layout). A crude converter, done
    before the product's own extraction (``extract_text`` of the text), which has none."""
    lines = []
    for line in source.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\\\"')) or line in {".", "'"}:
            continue
        if line.startswith((".", "'")):
            line = _ROFF_MACRO.sub("", line[0] + line[1:].lstrip())
            if line.startswith((".", "'")):
                continue  # a request without words (.if, .de, ...)
            line = line.replace('"', "")
        lines.append(_ROFF_ESCAPE.sub(lambda m: "-" if m.group(0) == "\\-" else "", line))
    return "\n".join(lines)


def _extracted(key: str, data: bytes, suffix: str, fallback: str) -> SourceDocument | None:
    try:
        extracted = extract_text(data=data, suffix=suffix, fallback_title=fallback)
    except ExtractionError:
        return None
    if not extracted.body.strip():
        return None
    return source_document(key, extracted.title, extracted.body)


# Generated pages that only list or index the others (javadoc's, haddock's, Sphinx's).
_INDEX_PAGES = {"genindex.html", "search.html", "index-all.html", "allclasses-index.html",
                "allpackages-index.html", "overview-tree.html", "package-tree.html",
                "doc-index.html", "doc-index-All.html"}  # fmt: skip
_INDEX_FOLDERS = {"class-use", "index-files", "src", "src-html"}


def html_docs(root: Path, prefix: str) -> list[SourceDocument]:
    """An HTML doc set's pages, keyed ``prefix:path``: not its generated index pages, nor
    the folders of copies and listings (``_sources``, ``_modules``, ``_static``, javadoc's
    ``class-use``, haddock's ``src``, hidden folders)."""
    if not root.is_dir():
        return []
    out = []
    with quiet_libraries():
        for path in sorted(root.rglob("*.html")):
            relative = path.relative_to(root)
            folders = relative.parts[:-1]
            if (
                relative.parts[0].startswith("_")
                or any(f.startswith(".") or f in _INDEX_FOLDERS for f in folders)
                or path.name in _INDEX_PAGES
                or path.name.endswith(("_source.html", "-members.html"))  # doxygen's listings
                or not path.is_file()  # octave's manuals are folders named *.html
            ):
                continue
            document = _extracted(f"{prefix}:{relative}", path.read_bytes(), ".html", path.stem)
            if document is not None:
                out.append(document)
    return out


def django_docs() -> list[SourceDocument]:
    """python-django-doc's HTML pages (not its generated index and module-source pages)."""
    return html_docs(DJANGO_DOC_ROOT, "django-doc")


# More of Debian's HTML documentation, read for sizes beyond the sets above (issue 17:
# real documents before any copy). Bench set-up: ``apt-get install -y postgresql-doc-15
# python-scipy-doc python-pandas-doc python-sklearn-doc python-sympy-doc
# python-statsmodels-doc python-astropy-doc python-sqlalchemy-doc sphinx-doc
# python-flask-doc python-werkzeug-doc python-jinja2-doc nodejs-doc erlang-doc octave-doc
# git-doc cppreference-doc-en-html openjdk-17-doc ghc-doc rust-doc libstdc++-12-doc
# libboost1.81-doc libgtk-4-doc libglib2.0-doc cmake-doc python-dask-doc
# python-xarray-doc python-pil-doc python-tornado-doc python-gevent-doc python-mpmath-doc
# python-lxml-doc python-pytest-doc python-hypothesis-doc python-scrapy-doc python-ase-doc
# python-biopython-doc python-cryptography-doc python-setuptools-doc maxima-doc``. A set
# not installed is left out: the figures say how many real chunks there were and how many
# copies were needed.
MORE_HTML_DOC_ROOTS = {
    "postgresql-doc": Path("/usr/share/doc/postgresql-doc-15/html"),
    "scipy-doc": Path("/usr/share/doc/python-scipy-doc/html"),
    "pandas-doc": Path("/usr/share/doc/python-pandas-doc/html"),
    "sklearn-doc": Path("/usr/share/doc/python-sklearn-doc/html"),
    "sympy-doc": Path("/usr/share/doc/python-sympy-doc/html"),
    "statsmodels-doc": Path("/usr/share/doc/python-statsmodels-doc/html"),
    "astropy-doc": Path("/usr/share/doc/python-astropy-doc/html"),
    "sqlalchemy-doc": Path("/usr/share/doc/python-sqlalchemy-doc/html"),
    "sphinx-doc": Path("/usr/share/doc/sphinx-doc/html"),
    "flask-doc": Path("/usr/share/doc/python-flask-doc/html"),
    "werkzeug-doc": Path("/usr/share/doc/python-werkzeug-doc/html"),
    "jinja2-doc": Path("/usr/share/doc/python-jinja2-doc/html"),
    "nodejs-doc": Path("/usr/share/doc/nodejs/api"),
    "erlang-doc": Path("/usr/share/doc/erlang-doc/doc"),
    "octave-doc": Path("/usr/share/doc/octave"),
    "git-doc": Path("/usr/share/doc/git-doc"),
    "cppreference": Path("/usr/share/cppreference/doc/html/en"),
    "openjdk-doc": Path("/usr/share/doc/openjdk-17-jre-headless/api"),
    "ghc-doc": Path("/usr/share/doc/ghc-doc/html"),
    # rust-doc: the standard library (not core's thousands of generated intrinsic pages,
    # nor alloc's, which std re-exports) and the books.
    **{
        f"rust-doc/{part}": Path("/usr/share/doc/rust-doc/html") / part
        for part in (
            "std",
            "book",
            "reference",
            "rust-by-example",
            "nomicon",
            "edition-guide",
            "embedded-book",
            "rustc",
            "rustdoc",
        )
    },
    "libstdc++-doc": Path("/usr/share/doc/gcc-12-base/libstdc++"),
    "boost-doc": Path("/usr/share/doc/libboost1.81-doc"),
    "gtk4-doc": Path("/usr/share/doc/libgtk-4-doc"),
    "gio-doc": Path("/usr/share/gtk-doc/html/gio"),
    "cmake-doc": Path("/usr/share/doc/cmake-data/html"),
    "dask-doc": Path("/usr/share/doc/python-dask-doc/html"),
    "xarray-doc": Path("/usr/share/doc/python-xarray-doc/html"),
    "pil-doc": Path("/usr/share/doc/python-pil-doc/html"),
    "tornado-doc": Path("/usr/share/doc/python-tornado-doc/html"),
    "gevent-doc": Path("/usr/share/doc/python-gevent-doc/html"),
    "mpmath-doc": Path("/usr/share/doc/python-mpmath-doc/html"),
    "lxml-doc": Path("/usr/share/doc/python-lxml/html"),
    "pytest-doc": Path("/usr/share/doc/python-pytest-doc/html"),
    "hypothesis-doc": Path("/usr/share/doc/python-hypothesis-doc/html"),
    "scrapy-doc": Path("/usr/share/doc/python-scrapy-doc/html"),
    "ase-doc": Path("/usr/share/doc/python-ase-doc/html"),
    "biopython-doc": Path("/usr/share/doc/python-biopython-doc/Doc"),
    "cryptography-doc": Path("/usr/share/doc/python-cryptography-doc/html"),
    "setuptools-doc": Path("/usr/share/doc/python-setuptools-doc/html"),
    "maxima-doc": Path("/usr/share/doc/maxima-doc/html"),
}


def man_pages() -> list[SourceDocument]:
    """The English man pages (sections 1-8: manpages, manpages-dev and every package's)."""
    import gzip

    out = []
    for path in sorted(MAN_ROOT.glob("man[1-8]/*")):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        source = raw.decode("utf-8", errors="replace")
        if source.lstrip().startswith(".so "):
            continue  # an alias of another page
        name = path.name.removesuffix(".gz")
        document = _extracted(f"man:{path.parent.name}/{name}", roff_text(source).encode(),
                              ".txt", name)  # fmt: skip
        if document is not None:
            out.append(document)
    return out


def varied_docs(enough: int | None = None) -> list[SourceDocument]:
    """Every real document the machine has for section 10, Python's first, set by set in
    a fixed order; with ``enough``, no further set is read once that many chunks are
    (the 100k size holds the same documents whatever else is installed)."""
    sets: list[Callable[[], list[SourceDocument]]] = [
        python_topics, debian_docs, django_docs, man_pages,
        *(functools.partial(html_docs, root, prefix)
          for prefix, root in MORE_HTML_DOC_ROOTS.items()),
    ]  # fmt: skip
    out: list[SourceDocument] = []
    for read in sets:
        if enough is not None and chunk_count(out) >= enough:
            break
        out += read()
    return out
