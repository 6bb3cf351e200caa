"""Turn source files into plain-text documents, and documents into chunks.

Extraction supports Markdown, plain text, reStructuredText, HTML and PDF. Every failure a
user can cause (bad encoding, empty file, encrypted PDF, ...) is an ``ExtractionError``
whose message is fit to show as is.

Chunks are character spans of the document body, so a citation can always point back at
the exact text it came from: ``body[span.start:span.end] == span.text``.

No Django imports: this module is tested on its own.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import pathlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from bs4 import BeautifulSoup
from bs4.element import CData, NavigableString, PageElement, PreformattedString, Tag
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, PdfReadError

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_TITLE_LENGTH",
    "SUPPORTED_SUFFIXES",
    "ChunkSpan",
    "ExtractedDocument",
    "ExtractionError",
    "chunk_text",
    "content_hash",
    "extract_file",
    "extract_text",
    "iter_source_files",
]

MAX_FILE_BYTES = 50 * 1024 * 1024
# Document.title is a CharField(max_length=300).
MAX_TITLE_LENGTH = 300

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})
_TEXT_SUFFIXES = _MARKDOWN_SUFFIXES | {".txt", ".rst"}
SUPPORTED_SUFFIXES: frozenset[str] = _TEXT_SUFFIXES | _HTML_SUFFIXES | {".pdf"}


class ExtractionError(Exception):
    """Raised with a clear, user-facing message (e.g. 'not valid UTF-8')."""


@dataclass(frozen=True)
class ExtractedDocument:
    title: str
    body: str


@dataclass(frozen=True)
class ChunkSpan:
    ordinal: int
    start: int
    end: int
    text: str


# ---------------------------------------------------------------------------- files


def iter_source_files(paths: Iterable[pathlib.Path]) -> Iterator[pathlib.Path]:
    """Supported files among ``paths``, folders walked recursively, sorted, each once.

    Hidden files and folders (names starting with ".") met while walking are skipped; a
    path given explicitly is used even if hidden. A missing path raises FileNotFoundError.
    """
    found: dict[str, pathlib.Path] = {}

    def add(path: pathlib.Path) -> None:
        if path.suffix.lower() in SUPPORTED_SUFFIXES:
            # realpath so "docs" and "./docs/a.md" (or a symlink) do not ingest a file twice.
            found.setdefault(os.path.realpath(path), path)

    for given in paths:
        if given.is_dir():
            for root, dirs, files in os.walk(given):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for name in files:
                    path = pathlib.Path(root, name)
                    if not name.startswith(".") and path.is_file():
                        add(path)
        elif given.is_file():
            add(given)
        elif not given.exists():
            raise FileNotFoundError(2, "No such file or directory", str(given))
    yield from sorted(found.values())


def extract_file(path: pathlib.Path) -> ExtractedDocument:
    """Read and extract one file; the title falls back to the file name without suffix."""
    suffix = path.suffix.lower()
    _check_suffix(suffix)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ExtractionError(_too_large(size))
        with path.open("rb") as handle:
            # The file may grow between stat() and read(); never read more than the limit.
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ExtractionError(f"cannot read file: {exc.strerror or exc}") from exc
    return extract_text(data=data, suffix=suffix, fallback_title=path.stem)


def extract_text(*, data: bytes, suffix: str, fallback_title: str) -> ExtractedDocument:
    """Extract the title and plain-text body of a file's bytes; ``suffix`` picks the format."""
    suffix = suffix.lower()
    if suffix and not suffix.startswith("."):
        suffix = "." + suffix
    _check_suffix(suffix)
    if len(data) > MAX_FILE_BYTES:
        raise ExtractionError(_too_large(len(data)))
    if not data.strip():
        raise ExtractionError("file is empty")
    if suffix in _HTML_SUFFIXES:
        title, body = _extract_html(data)
    elif suffix == ".pdf":
        title, body = _extract_pdf(data)
    else:
        title, body = _extract_plain(data, suffix)
    return ExtractedDocument(title=_clean_title(title) or _clean_title(fallback_title), body=body)


def content_hash(body: str) -> str:
    """SHA-256 hex digest of the UTF-8 encoded body."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _check_suffix(suffix: str) -> None:
    if suffix not in SUPPORTED_SUFFIXES:
        kind = suffix or "(no extension)"
        supported = " ".join(sorted(SUPPORTED_SUFFIXES))
        raise ExtractionError(f"unsupported file type {kind} (supported: {supported})")


def _too_large(size: int) -> str:
    limit = MAX_FILE_BYTES // (1024 * 1024)
    return f"file is too large ({size / (1024 * 1024):.1f} MB; the limit is {limit} MB)"


# ------------------------------------------------------------------ normalization

_LINE_BREAKS = str.maketrans({"\f": "\n", "\v": "\n", "\x85": "\n", "\u2028": "\n"})
_EXCESS_BLANK_LINES = re.compile(r"\n{4,}")
_WHITESPACE = re.compile(r"\s+")
_SURROGATES = re.compile("[\ud800-\udfff]")


def _normalize_body(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2029", "\n\n")
    text = text.translate(_LINE_BREAKS)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _EXCESS_BLANK_LINES.sub("\n\n\n", text).strip("\n")


def _sanitize(text: str) -> str:
    # Parsers can hand back NULs (PostgreSQL rejects them) and lone surrogates (not UTF-8).
    return _SURROGATES.sub("\ufffd", text.replace("\x00", ""))


def _clean_title(title: str | None) -> str:
    if not title:
        return ""
    title = _WHITESPACE.sub(" ", _sanitize(title)).strip()
    if len(title) > MAX_TITLE_LENGTH:
        title = title[: MAX_TITLE_LENGTH - 1].rstrip() + "\u2026"
    return title


# ------------------------------------------------------------------- plain text


def _extract_plain(data: bytes, suffix: str) -> tuple[str | None, str]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"not valid UTF-8 (invalid byte at offset {exc.start}); save the file as UTF-8"
        ) from exc
    if "\x00" in text:
        raise ExtractionError("not valid UTF-8 text (contains NUL bytes: binary or UTF-16?)")
    body = _normalize_body(text)
    if not body.strip():
        raise ExtractionError("file is empty")
    if suffix in _MARKDOWN_SUFFIXES:
        return _markdown_title(body), body
    if suffix == ".rst":
        return _rst_title(body), body
    return None, body


_FRONT_MATTER_TITLE = re.compile(r"""^title\s*:\s*(?P<q>["']?)(?P<title>.*?)(?P=q)\s*$""", re.I)
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(?P<level>#{1,6})(?:[ \t]+(?P<text>.*))?$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT = re.compile(r"^ {0,3}(?:(?P<h1>=+)|-+)[ \t]*$")
# A paragraph starting like this is a list item, quote or HTML, never a setext heading.
_NOT_SETEXT_TEXT = re.compile(r"^ {0,3}(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|<)")


def _markdown_title(body: str) -> str | None:
    """Front matter ``title:``, else the first level-1 heading, else the first heading."""
    lines = body.split("\n")
    start = 0
    if lines[0] == "---":
        for index in range(1, len(lines)):
            if lines[index] in ("---", "..."):
                for line in lines[1:index]:
                    match = _FRONT_MATTER_TITLE.match(line)
                    # ">" and "|" open a multi-line YAML string: not worth parsing here.
                    if match and match["title"].strip() and match["title"][0] not in ">|":
                        return match["title"]
                start = index + 1
                break

    first_heading: str | None = None
    paragraph: list[str] = []
    fence = ""
    for line in lines[start:]:
        if fence:
            closing = _FENCE.match(line)
            if closing and closing["fence"].startswith(fence) and not line.strip(" `~"):
                fence = ""
            continue
        if not line.strip():
            paragraph = []
            continue
        opening = _FENCE.match(line)
        if opening:
            fence, paragraph = opening["fence"], []
            continue
        heading: str | None = None
        level = 0
        atx = _ATX.match(line)
        setext = _SETEXT.match(line)
        if atx:
            heading = _ATX_CLOSING.sub("", (atx["text"] or "").strip())
            level = len(atx["level"])
            paragraph = []
        elif setext:
            if paragraph and not _NOT_SETEXT_TEXT.match(paragraph[0]):
                heading = " ".join(part.strip() for part in paragraph)
                level = 1 if setext["h1"] else 2
            paragraph = []
        elif paragraph or not line.startswith("    "):
            paragraph.append(line)
        if heading and heading.strip():
            if level == 1:
                return heading
            first_heading = first_heading or heading
    return first_heading


_RST_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1*$""")


def _rst_title(body: str) -> str | None:
    """The first section title: a line with an underline (and maybe an overline)."""
    lines = body.split("\n")
    after_blank = True
    for index, line in enumerate(lines[:-1]):
        if not line.strip():
            after_blank = True
            continue
        if after_blank:
            below = lines[index + 1]
            if _is_adornment(line) and index + 2 < len(lines):
                text, under = below.strip(), lines[index + 2]
                # docutils rejects a title whose overline and underline differ.
                if text and not _is_adornment(text) and under == line:
                    return text
            elif not line[0].isspace() and _is_adornment(below):
                text = line.strip()
                # As docutils: an underline shorter than the title needs 4+ characters.
                if not _is_adornment(text) and (len(below) >= len(text) or len(below) >= 4):
                    return text
        after_blank = False
    return None


def _is_adornment(line: str) -> bool:
    return len(line) >= 2 and _RST_ADORNMENT.match(line) is not None


# ------------------------------------------------------------------------- HTML

_DROPPED_TAGS = frozenset(
    {"script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object"}
)
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "center", "dd",
        "details", "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure",
        "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr",
        "html", "legend", "li", "main", "menu", "nav", "ol", "p", "pre", "section",
        "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
    }
)  # fmt: skip
_CELL_TAGS = frozenset({"td", "th"})
# Text nodes have their whitespace collapsed to " " before they are buffered, so these two
# controls (both whitespace) can only come from <br> and table cells.
_LINE_BREAK = "\n"
_CELL_END = "\x1f"
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.I)


def _html_encoding(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    match = _META_CHARSET.search(data[:8192])
    if match is None:
        return "utf-8"
    try:
        name = codecs.lookup(match[1].decode("ascii")).name
    except LookupError:
        return "utf-8"
    # The HTML standard's rules: a <meta> cannot really declare UTF-16 (the bytes it was
    # read from are ASCII-compatible), and latin-1 / ASCII mean windows-1252.
    if name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    if name in ("iso8859-1", "ascii"):
        return "cp1252"
    return name


def _extract_html(data: bytes) -> tuple[str | None, str]:
    soup = BeautifulSoup(data.decode(_html_encoding(data), errors="replace"), "html.parser")
    title: str | None = None
    for candidate in soup.find_all("title"):
        if isinstance(candidate, Tag) and candidate.find_parent("svg") is None:
            title = _clean_title(candidate.get_text()) or None
            if title:
                break
    if title is None:
        for h1 in soup.find_all("h1"):
            if isinstance(h1, Tag) and not any(p.name in _DROPPED_TAGS for p in h1.parents):
                title = _clean_title(h1.get_text()) or None
                break

    blocks: list[str] = []
    buffer: list[str] = []
    pre_depth = 0

    def flush() -> None:
        text = "".join(buffer)
        buffer.clear()
        if pre_depth:
            text = text.replace(_CELL_END, " ")
            block = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
        else:
            lines = []
            for line in text.split(_LINE_BREAK):
                cells = (" ".join(cell.split()) for cell in line.split(_CELL_END))
                lines.append(" | ".join(cell for cell in cells if cell))
            block = "\n".join(lines).strip("\n")
        if block.strip():
            blocks.append(block)

    # An explicit stack, not recursion: real-world HTML can nest deeper than Python's limit.
    stack: list[tuple[PageElement, bool]] = [(soup, True)]
    while stack:
        node, entering = stack.pop()
        if isinstance(node, Tag):
            name = node.name
            if entering:
                if name in _DROPPED_TAGS or node.has_attr("hidden"):
                    continue
                if name == "br":
                    buffer.append(_LINE_BREAK)
                    continue
                if name in _BLOCK_TAGS:
                    flush()
                pre_depth += name == "pre"
                stack.append((node, False))
                stack.extend((child, True) for child in reversed(node.contents))
            else:
                if name in _BLOCK_TAGS:
                    flush()
                pre_depth -= name == "pre"
                if name in _CELL_TAGS:
                    buffer.append(_CELL_END)
        elif isinstance(node, NavigableString):
            if isinstance(node, PreformattedString) and not isinstance(node, CData):
                continue  # comments, doctypes, processing instructions
            buffer.append(str(node) if pre_depth else _WHITESPACE.sub(" ", node))
    flush()

    body = _normalize_body(_sanitize("\n\n".join(blocks)))
    if not body.strip():
        raise ExtractionError("HTML file has no readable text")
    return title, body


# -------------------------------------------------------------------------- PDF


def _extract_pdf(data: bytes) -> tuple[str | None, str]:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                decrypted = reader.decrypt("")
            except (DependencyError, NotImplementedError) as exc:
                raise ExtractionError(f"PDF is encrypted in an unsupported way ({exc})") from exc
            if decrypted == PasswordType.NOT_DECRYPTED:
                raise ExtractionError("PDF is password-protected")
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
        pages = [page.extract_text() or "" for page in reader.pages]
    except ExtractionError:
        raise
    except PdfReadError as exc:
        raise ExtractionError(f"not a readable PDF ({exc})") from exc
    # pypdf raises all sorts of errors on damaged files (KeyError, ValueError, ...).
    except Exception as exc:
        raise ExtractionError(f"not a readable PDF ({type(exc).__name__}: {exc})") from exc

    body = _normalize_body(_sanitize("\n\n".join(_normalize_body(page) for page in pages)))
    if not body.strip():
        raise ExtractionError("PDF has no extractable text (scanned images need OCR first)")
    return (str(title) if title else None), body


# ---------------------------------------------------------------------- chunking

# Break points, best first. Each is searched only inside the window of the chunk being cut.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")
_SENTENCE_END = re.compile(r"""[.!?]["')\]\u2019\u201d]*\s""")
# Matches once, at the window's last whitespace: a single C-level scan, no Python loop.
_LAST_WHITESPACE = re.compile(r"\s\S*\Z")
_NON_WHITESPACE = re.compile(r"\S")
_WORD_START = re.compile(r"\s\S")


def chunk_text(body: str, *, size: int = 1200, overlap: int = 0) -> list[ChunkSpan]:
    """Cut ``body`` into spans of at most ``size`` characters, trimmed of whitespace.

    Breaks fall at the last paragraph break that fits, else the last line end, sentence end,
    or whitespace; a word longer than ``size`` is cut at ``size``. With ``overlap``, each
    chunk starts at the first word beginning at most ``overlap`` characters before the end
    of the previous one (and after its start), so consecutive chunks share some text.
    """
    if size < 100:
        raise ValueError(f"size must be at least 100, got {size}")
    if overlap < 0 or 2 * overlap >= size:
        raise ValueError(f"overlap must be >= 0 and less than size / 2, got {overlap}")

    end_of_text = len(body.rstrip())
    spans: list[ChunkSpan] = []
    first = _NON_WHITESPACE.search(body, 0, end_of_text)
    next_text = first.start() if first else end_of_text
    start = next_text
    while next_text < end_of_text:
        cut = _find_break(body, next_text, start + size, end_of_text)
        if cut < 0 and start < next_text:
            # The overlap pushed a word that fits in a chunk past the limit: drop the overlap
            # rather than cut the word.
            start = next_text
            cut = _find_break(body, next_text, start + size, end_of_text)
        if cut < 0:
            cut = start + size  # a word longer than a chunk: the only place to cut
        text = body[start:cut].rstrip()
        end = start + len(text)
        spans.append(ChunkSpan(ordinal=len(spans), start=start, end=end, text=text))
        found = _NON_WHITESPACE.search(body, cut, end_of_text)
        next_text = found.start() if found else end_of_text
        start = next_text
        if overlap:
            # \s\S from one before the earliest allowed start, so a word starting exactly
            # there counts; endpos=end keeps the overlap inside the previous chunk.
            earliest = max(end - overlap, spans[-1].start + 1)
            word = _WORD_START.search(body, earliest - 1, end)
            if word is not None:
                start = word.start() + 1
    return spans


def _find_break(body: str, after: int, limit: int, end_of_text: int) -> int:
    """Where to cut: a position in (after, limit], or -1 if only a cut inside a word would do.

    ``body[after]`` is not whitespace and every candidate lies after it, so each chunk covers
    at least one character the previous chunk did not.
    """
    if limit >= end_of_text:
        return end_of_text
    stop = limit + 1  # the cut is exclusive, so whitespace at ``limit`` itself may be used
    cut = -1
    for match in _PARAGRAPH_BREAK.finditer(body, after, stop):
        cut = match.start()
    if cut > after:
        return cut
    cut = body.rfind("\n", after, stop)
    if cut > after:
        return cut
    for match in _SENTENCE_END.finditer(body, after, stop):
        cut = match.end() - 1
    if cut > after:
        return cut
    space = _LAST_WHITESPACE.search(body, after, stop)
    return space.start() if space is not None else -1
