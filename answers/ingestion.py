"""Turn source files into plain-text documents, and documents into chunks.

Extraction supports Markdown, plain text, reStructuredText, HTML (main content only), PDF,
.docx, .pptx and .xlsx (docs/ingestion.md, ADR 0012). Every failure a user can cause (bad
encoding, empty file, encrypted PDF, damaged .docx, ...) is an ``ExtractionError`` whose
message is fit to show as is, on one line. Libraries' own warnings and log records are kept
out of the caller's output.

Chunks are character spans of the document body, so a citation can always point back at
the exact text it came from: ``body[span.start:span.end] == span.text``.

No Django imports: this module is tested on its own.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import hashlib
import io
import logging
import os
import pathlib
import re
import stat
import struct
import threading
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import lxml.etree
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from .markup import code_span, escape_text, fenced, rst_to_markdown

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_TITLE_LENGTH",
    "MAX_UNPACKED_BYTES",
    "SUPPORTED_SUFFIXES",
    "ChunkSpan",
    "ExtractedDocument",
    "ExtractionError",
    "SkippedFile",
    "chunk_text",
    "content_hash",
    "extract_file",
    "extract_text",
    "iter_source_files",
    "quiet_libraries",
    "scan_source_files",
    "shown_path",
    "undecodable_path_reason",
]

_T = TypeVar("_T")

MAX_FILE_BYTES = 50 * 1024 * 1024
# Document.title is a CharField(max_length=300).
MAX_TITLE_LENGTH = 300

_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_HTML_SUFFIXES = frozenset({".html", ".htm"})
_TEXT_SUFFIXES = _MARKDOWN_SUFFIXES | {".txt", ".rst"}
_OFFICE_SUFFIXES = frozenset({".docx", ".pptx", ".xlsx"})
SUPPORTED_SUFFIXES: frozenset[str] = _TEXT_SUFFIXES | _HTML_SUFFIXES | _OFFICE_SUFFIXES | {".pdf"}
# Loggers of the parsing libraries: their records (pypdf's "Ignoring wrong pointing object",
# openpyxl's style notes, ...) are about the file's insides, not for the person ingesting.
_LIBRARY_LOGGERS = ("pypdf", "pdfminer", "pypdfium2", "openpyxl", "docx", "pptx")


class ExtractionError(Exception):
    """Raised with a clear, user-facing message (e.g. 'not valid UTF-8')."""


@dataclass(frozen=True)
class ExtractedDocument:
    """A file's text as the corpus stores it: a title and a plain-text body."""

    title: str
    body: str


@dataclass(frozen=True)
class SkippedFile:
    """A path given or met while walking folders that is not ingested, and why (one line)."""

    path: pathlib.Path
    reason: str


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
    yield from scan_source_files(paths)[0]


def scan_source_files(
    paths: Iterable[pathlib.Path], *, max_key_length: int | None = None
) -> tuple[list[pathlib.Path], list[SkippedFile], list[SkippedFile]]:
    """``(supported, unsupported, unreadable)``: as ``iter_source_files``, plus what is left
    out and why.

    Unsupported are files of a type not ingested. Unreadable are paths that would be ingested
    but cannot be: given paths that are neither a folder nor a regular file (a FIFO,
    /dev/null) or cannot be reached (a folder on the way not searchable), folders that cannot
    be listed, and, of a supported type, broken symbolic links, FIFOs and the like met in
    folders, symbolic links met in a folder that lead to a file outside it (anyone who may
    write to a shared folder could link ``/etc/passwd`` into it), and files whose path is
    not valid UTF-8 (``undecodable_path_reason``). None of them is opened. With
    ``max_key_length``, so are files whose absolute path (the document's source key) is
    longer: the database would refuse the key, and with it the batch it was written in. Left
    out on purpose, and not reported, are hidden files and, met while walking a folder,
    copies and stubs of pages found elsewhere in it: a Sphinx build's ``_sources`` and
    generated index and search pages, and HTML redirect stubs (``_walk_leaves_out``).
    """
    found: dict[str, pathlib.Path] = {}
    unsupported: dict[str, SkippedFile] = {}
    unreadable: dict[str, SkippedFile] = {}

    def add(path: pathlib.Path) -> None:
        # realpath so "docs" and "./docs/a.md" (or a symlink) do not ingest a file twice.
        key = os.path.realpath(path)
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            unsupported.setdefault(key, SkippedFile(path, _unsupported(path.suffix.lower())))
        elif reason := undecodable_path_reason(key):  # the key is what the database stores
            unreadable.setdefault(key, SkippedFile(path, reason))
        elif max_key_length is not None and len(key) > max_key_length:
            reason = f"its path is longer than {max_key_length:,} characters; move it"
            unreadable.setdefault(key, SkippedFile(path, reason))
        else:
            found.setdefault(key, path)

    def refuse(path: pathlib.Path) -> None:
        # Not the realpath: a broken link's own path is the one to fix.
        unreadable.setdefault(os.path.abspath(path), SkippedFile(path, _not_a_file(path)))

    def unlisted(error: OSError) -> None:
        # A folder os.walk cannot list (permissions, removed meanwhile) was skipped in silence.
        path = pathlib.Path(error.filename if error.filename is not None else given)
        reason = f"cannot list this folder ({error.strerror or error})"
        unreadable.setdefault(os.path.abspath(path), SkippedFile(path, reason))

    for given in paths:
        try:
            os.lstat(given)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(2, "No such file or directory", str(given)) from None
        except OSError as exc:  # a folder on its path cannot be searched: not "missing"
            reason = f"cannot read it ({exc.strerror or exc})"
            unreadable.setdefault(os.path.abspath(given), SkippedFile(given, reason))
            continue
        if given.is_dir():
            inside = os.path.join(os.path.realpath(given), "")
            for root, dirs, files in os.walk(given, onerror=unlisted):
                sphinx = _SPHINX_SEARCH_INDEX in files
                dirs[:] = [d for d in dirs if not _walk_leaves_out(d, sphinx=sphinx, folder=True)]
                for name in dirs:
                    # os.walk does not follow links to folders (they may lead out of the
                    # tree, or round in a loop): say so, rather than leave them out unseen.
                    link = pathlib.Path(root, name)
                    if link.is_symlink():
                        unreadable.setdefault(os.path.abspath(link), SkippedFile(link, _LINKED))
                for name in files:
                    if _walk_leaves_out(name, sphinx=sphinx, folder=False):
                        continue
                    path = pathlib.Path(root, name)
                    # Anyone who may write to the folder could link /etc/passwd (or the
                    # server's settings) into it: only the folder's own files are read.
                    if (
                        path.is_symlink()
                        and path.exists()
                        and path.suffix.lower() in SUPPORTED_SUFFIXES
                        and not os.path.realpath(path).startswith(inside)
                    ):
                        unreadable.setdefault(os.path.abspath(path), SkippedFile(path, _LINKED_OUT))
                        continue
                    if path.is_file():
                        if not _is_redirect_stub(path):
                            add(path)
                    elif path.suffix.lower() in SUPPORTED_SUFFIXES:
                        refuse(path)  # it would have been ingested: say why it is not
        elif given.is_file():
            add(given)
        elif given.exists() or given.is_symlink():
            refuse(given)
        else:
            raise FileNotFoundError(2, "No such file or directory", str(given))
    return (
        sorted(found.values()),
        sorted(unsupported.values(), key=lambda item: item.path),
        sorted(unreadable.values(), key=lambda item: item.path),
    )


def undecodable_path_reason(path: str | os.PathLike[str]) -> str:
    """Why ``path`` cannot be a document's source key, or "" if it can: a name whose bytes
    are not UTF-8 (Python holds each such byte as a lone surrogate, which neither database
    stores, and which failed the whole batch it was written with)."""
    text = os.fspath(path)
    if text.isascii():
        return ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return ""
    try:
        os.path.basename(text).encode("utf-8")
    except UnicodeEncodeError:
        return "its file name is not valid UTF-8; rename it"
    return "the name of a folder on its path is not valid UTF-8; rename it"


def shown_path(path: str | os.PathLike[str]) -> str:
    """``path`` fit to print anywhere: a byte of its name that is not UTF-8 shown as
    ``\\xe9`` (as a lone surrogate it fails to encode on a UTF-8 stream)."""
    shown = os.fsencode(path).decode("utf-8", "backslashreplace")
    # And a control character as its escape: a line break in a name forged a report line,
    # an ESC drove the terminal it was printed on.
    return _CONTROL_CHARACTERS.sub(_escaped, shown) if not shown.isprintable() else shown


_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    character = match[0]
    return _ESCAPES.get(character) or f"\\x{ord(character):02x}"


_LINKED = "a symbolic link to a folder, not followed (give the folder itself as a PATH)"
_LINKED_OUT = (
    "a symbolic link to a file outside the folder, not followed (give the file itself as a PATH)"
)


def _not_a_file(path: pathlib.Path) -> str:
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as exc:
            return "a symbolic link loop" if exc.errno == errno.ELOOP else "a broken symbolic link"
    return "not a regular file"


# A Sphinx build's root holds searchindex.js, and beside it "_sources" (each page's source
# again, as .txt) and its generated pages: the general index, the domain indices
# (py-modindex.html, ...) and the search page, all links to the other pages.
_SPHINX_SEARCH_INDEX = "searchindex.js"
_SPHINX_GENERATED_PAGE = re.compile(r"(?:genindex(?:-[^.]+)?|[a-z]+-modindex|search)\.html")
# A redirect stub is a few hundred bytes (pandas ships 1,511 of them); pages above this size
# are not read while walking.
_REDIRECT_STUB_MAX_BYTES = 4096
_META_TAG = re.compile(rb"<meta\b[^>]*>", re.I)
_REFRESH = re.compile(rb"""http-equiv\s*=\s*["']?refresh\b""", re.I)
_IMMEDIATE_REDIRECT = re.compile(rb"""content\s*=\s*["']?\s*0+(?:\.0*)?\s*[;,]\s*url\s*=""", re.I)


def _walk_leaves_out(name: str, *, sphinx: bool, folder: bool) -> bool:
    """Whether a folder walk leaves out the entry ``name``: hidden names, and in a Sphinx
    build's root (``sphinx``) the ``_sources`` folder and the generated pages."""
    if name.startswith("."):
        return True
    if not sphinx:
        return False
    return name == "_sources" if folder else _SPHINX_GENERATED_PAGE.fullmatch(name) is not None


def _is_redirect_stub(path: pathlib.Path) -> bool:
    """A small HTML page that sends the browser elsewhere at once (``<meta
    http-equiv="refresh" content="0; url=...">``): nobody reads it, it has no text of its own."""
    if path.suffix.lower() not in _HTML_SUFFIXES:
        return False
    try:
        if path.stat().st_size > _REDIRECT_STUB_MAX_BYTES:
            return False
        with path.open("rb") as handle:
            head = handle.read(_REDIRECT_STUB_MAX_BYTES)
    except OSError:
        return False  # extraction reports it
    return any(
        _REFRESH.search(tag) and _IMMEDIATE_REDIRECT.search(tag) for tag in _META_TAG.findall(head)
    )


def extract_file(path: pathlib.Path) -> ExtractedDocument:
    """Read and extract one file; the title falls back to the file name without suffix."""
    suffix = path.suffix.lower()
    _check_suffix(suffix)
    try:
        info = path.stat()
        # Never opened: a FIFO's read waits for a writer, a device's may never end.
        if not stat.S_ISREG(info.st_mode):
            raise ExtractionError("not a regular file")
        size = info.st_size
        if size > MAX_FILE_BYTES:
            raise ExtractionError(_too_large(size))
        with path.open("rb") as handle:
            # The file may grow between stat() and read(); never read more than the limit.
            # Asked for its size and a byte more first: read(limit) allocates the whole
            # limit (50 MB) before reading, a tenth of a worker's time on 40 KB pages.
            data = handle.read(size + 1)
            if len(data) > size:  # it grew: the rest, up to the limit
                data += handle.read(MAX_FILE_BYTES + 1 - len(data))
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
    if not data or data.isspace():  # not data.strip(): that copies the whole file
        raise ExtractionError("file is empty")
    with quiet_libraries():
        if suffix in _HTML_SUFFIXES:
            title, body = _extract_html(data)
        elif suffix == ".pdf":
            title, body = _extract_pdf(data)
        elif suffix == ".docx":
            title, body = _extract_docx(data)
        elif suffix == ".pptx":
            title, body = _extract_pptx(data)
        elif suffix == ".xlsx":
            title, body = _extract_xlsx(data)
        else:
            title, body = _extract_plain(data, suffix)
    return ExtractedDocument(title=_clean_title(title) or _clean_title(fallback_title), body=body)


def content_hash(body: str) -> str:
    """SHA-256 hex digest of the UTF-8 encoded body."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


_quiet = threading.local()


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Silence the parsing libraries' warnings and log records for one extraction, or for
    many: nested uses inside one are free (each ``setLevel`` clears every logger's cache,
    which cost 0.7 ms a file when done per extraction)."""
    if getattr(_quiet, "depth", 0):
        yield
        return
    _quiet.depth = 1
    try:
        with _quiet_libraries():
            yield
    finally:
        _quiet.depth = 0


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _LIBRARY_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.CRITICAL + 1)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def _unsupported(suffix: str) -> str:
    kind = suffix or "(no extension)"
    supported = " ".join(sorted(SUPPORTED_SUFFIXES))
    return f"unsupported file type {kind} (supported: {supported})"


def _check_suffix(suffix: str) -> None:
    if suffix not in SUPPORTED_SUFFIXES:
        raise ExtractionError(_unsupported(suffix))


def _too_large(size: int) -> str:
    limit = MAX_FILE_BYTES // (1024 * 1024)
    return f"file is too large ({size / (1024 * 1024):.1f} MB; the limit is {limit} MB)"


# ------------------------------------------------------------------ normalization

_LINE_BREAK_CHARACTERS = ("\f", "\v", "\x85", "\u2028")
_LINE_BREAKS = str.maketrans(dict.fromkeys(_LINE_BREAK_CHARACTERS, "\n"))
_EXCESS_BLANK_LINES = re.compile(r"\n{4,}")
_WHITESPACE = re.compile(r"\s+")
_SURROGATES = re.compile("[\ud800-\udfff]")


def _collapse_whitespace(text: str) -> str:
    """``_WHITESPACE.sub(" ", text)`` (each run of whitespace one space), by ``str.split``,
    which splits on the same characters, at a third of the cost."""
    words = text.split()
    if not words:
        return " " if text else ""
    collapsed = " ".join(words)
    if text[0].isspace():
        collapsed = " " + collapsed
    if text[-1].isspace():
        collapsed += " "
    return collapsed


def _normalize_body(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2029", "\n\n")
    # str.translate looks every character up (a fifth of this function on HTML pages);
    # finding none of the four is four C scans.
    if any(character in text for character in _LINE_BREAK_CHARACTERS):
        text = text.translate(_LINE_BREAKS)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _EXCESS_BLANK_LINES.sub("\n\n\n", text).strip("\n")


def _sanitize(text: str) -> str:
    # Parsers can hand back NULs (PostgreSQL rejects them) and lone surrogates (not UTF-8).
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.isascii():  # O(1) in CPython
        return text
    try:
        # Surrogates are the only code points UTF-8 cannot encode: a C pass, where the
        # regular expression took six times as long on a page of HTML (0.13 ms).
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


def _clean_title(title: str | None) -> str:
    if not title:
        return ""
    title = _WHITESPACE.sub(" ", _sanitize(title))
    # A title is one line of text: control characters (ESC sequences) are no part of it.
    title = _CONTROL_CHARACTERS.sub("", title).strip()
    if len(title) > MAX_TITLE_LENGTH:
        title = title[: MAX_TITLE_LENGTH - 1].rstrip() + "\u2026"
    return title


# ------------------------------------------------------------------- plain text


# Byte order marks that declare a text file's encoding as surely as HTML's BOM does (UTF-32's
# first: UTF-32LE's begins with UTF-16LE's).
_UNICODE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"),
)


def _decode_plain(data: bytes) -> str:
    """UTF-8 (a BOM allowed), or UTF-16/32 when the file starts with its byte order mark
    (Windows Notepad's "Unicode")."""
    for bom, codec, name in _UNICODE_BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise ExtractionError(
                    f"not valid {name} (it starts with its byte order mark; invalid data "
                    f"at byte {exc.start}); save the file as UTF-8"
                ) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ExtractionError(
            f"not valid UTF-8 (invalid byte at offset {exc.start}); save the file as UTF-8"
        ) from exc


def _extract_plain(data: bytes, suffix: str) -> tuple[str | None, str]:
    text = _decode_plain(data)
    if "\x00" in text:
        raise ExtractionError("not valid UTF-8 text (contains NUL bytes: binary or UTF-16?)")
    body = _normalize_body(text)
    if not body.strip():
        raise ExtractionError("file is empty")
    if suffix in _MARKDOWN_SUFFIXES:
        # The title is read from the front matter; the rest of it is the site generator's
        # (tags, layout, dates), not text anyone asks about or wants quoted as a source.
        return _markdown_title(body), _without_front_matter(body)
    if suffix == ".rst":
        # Stored as Markdown like every body (ADR 0026); the title is read from the reST.
        return _rst_title(body), _normalize_body(rst_to_markdown(body))
    return None, body


_FRONT_MATTER_TITLE = re.compile(r"""^title\s*:\s*(?P<q>["']?)(?P<title>.*?)(?P=q)\s*$""", re.I)
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(?P<level>#{1,6})(?:[ \t]+(?P<text>.*))?$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT = re.compile(r"^ {0,3}(?:(?P<h1>=+)|-+)[ \t]*$")
# A paragraph starting like this is a list item, quote or HTML, never a setext heading.
_NOT_SETEXT_TEXT = re.compile(r"^ {0,3}(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|<)")


# A front matter block's lines: YAML keys, list items, comments, continuations, blanks.
_FRONT_MATTER_LINE = re.compile(r"^(?:[\w.-]+[ \t]*:(?:[ \t].*)?|[ \t-].*|#.*|)$")


def _without_front_matter(body: str) -> str:
    """``body`` without a leading YAML front matter block (``---`` ... ``---`` or ``...``),
    the way Jekyll, Hugo and MkDocs read it; a block whose lines are not YAML-like is
    Markdown (a rule, then text) and stays, as does one that is the whole file."""
    lines = body.split("\n")
    if lines[0] != "---":
        return body
    for index in range(1, len(lines)):
        if lines[index] in ("---", "..."):
            rest = "\n".join(lines[index + 1 :]).lstrip("\n")
            if not rest.strip():
                return body
            if all(_FRONT_MATTER_LINE.match(line) for line in lines[1:index]):
                return rest
            return body
    return body


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
_HEADING_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_CODE_TAGS = frozenset({"code", "kbd", "samp", "tt"})
# Inline emphasis kept as Markdown's delimiters.
_EMPHASIS_TAGS = {"em": "*", "i": "*", "strong": "**", "b": "**"}
# Every tag the walk does more for than take its text (the rest: one test, no other).
_MARKED_TAGS = frozenset(
    {"br", "pre", *_BLOCK_TAGS, *_CELL_TAGS, *_HEADING_TAGS, *_CODE_TAGS, *_EMPHASIS_TAGS}
)
# Site chrome, not content (ADR 0031). Two tiers, because the same markup means chrome around
# a page and content inside it: docutils renders a reST ``.. sidebar::``, a topic and every
# footnote as <aside> (class "sidebar" before docutils 0.18), a page's own text.
# Chrome wherever it is: navigation landmarks, and the navigation of the common documentation
# generators: Texinfo "nav-panel"/"section-toc"; DocBook "navheader"/"navfooter"/"toc" (a
# chapter's list of its sections' pages); Sphinx "related"/"sphinxsidebar", the "¶" permalinks
# ("headerlink") and viewcode's "[source]"/"[docs]" links; pydata-sphinx-theme (pandas,
# SciPy) "bd-sidebar"/"bd-toc"/"prev-next-area"/"editthispage"; Doxygen "navpath".
_CHROME_TAGS = frozenset({"nav"})
_CHROME_ROLES = frozenset({"navigation", "banner", "contentinfo", "search"})
_CHROME_CLASSES = frozenset(
    {
        "nav-panel", "section-toc", "mini-toc", "navheader", "navfooter", "toc", "navigation",
        "related", "sphinxsidebar", "headerlink", "viewcode-link", "viewcode-back", "navbar",
        "bd-sidebar", "bd-toc", "prev-next-area", "editthispage", "navpath", "breadcrumb",
        "breadcrumbs", "skip-link",
    }
)  # fmt: skip
# Django's documentation theme marks its chrome by id: the header, its global navigation,
# the sidebar (table of contents, previous/next topic, search, "Last update") and the footer.
_CHROME_IDS = frozenset({"hd", "global-nav", "sidebar", "ft"})
# Chrome only around the main content (when the page has no main element, the whole page is
# walked and these are the site's); inside it they are the page's own side content.
_PAGE_CHROME_TAGS = frozenset({"aside"})
_PAGE_CHROME_ROLES = frozenset({"complementary"})
_PAGE_CHROME_CLASSES = frozenset({"header", "footer", "sidebar"})
# <header>/<footer> are page chrome at page level, but an article's own header holds its title.
_SECTIONING = frozenset({"article", "main", "section"})
# Text nodes have their whitespace collapsed to " " before they are buffered, so these two
# controls (both whitespace) can only come from <br> and table cells.
_LINE_BREAK = "\n"
_CELL_END = "\x1f"
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:\-]+)""", re.I)


# The HTML standard's encodings (encoding.spec.whatwg.org, "Names and labels") that Python
# has, by the names Python knows them under. Not a rule over Python's codecs: those also
# hold binary transforms (base64), codecs a <meta> cannot be read in (UTF-16, UTF-7,
# EBCDIC, punycode) and ASCII-compatible ones no browser reads (cp437, mac-greek).
_HTML_STANDARD_ENCODINGS = (
    "utf-8 ibm866 iso-8859-2 iso-8859-3 iso-8859-4 iso-8859-5 iso-8859-6 iso-8859-7 "
    "iso-8859-8 iso-8859-10 iso-8859-13 iso-8859-14 iso-8859-15 iso-8859-16 koi8-r koi8-u "
    "macintosh cp874 windows-1250 windows-1251 windows-1252 windows-1253 windows-1254 "
    "windows-1255 windows-1256 windows-1257 windows-1258 mac-cyrillic gbk gb18030 big5 "
    "big5hkscs euc-jp iso-2022-jp shift_jis euc-kr"
)
# Labels the standard reads as another encoding than Python's codec of that name: Latin-1
# and ASCII as windows-1252, Latin-5 as windows-1254, Thai as windows-874, GB2312 as GBK.
# Shift_JIS and EUC-KR as browsers decode them, with the Windows extensions (Python's
# shift_jis and euc_kr codecs replace NEC's "\u2460" and cp949's "\uac02").
_HTML_STANDARD_REMAPS = {
    "iso-8859-1": "windows-1252", "ascii": "windows-1252", "iso-8859-9": "windows-1254",
    "iso-8859-11": "cp874", "tis-620": "cp874", "gb2312": "gbk",
    "shift_jis": "cp932", "cp932": "cp932", "euc-kr": "cp949", "cp949": "cp949",
}  # fmt: skip
# The standard's labels that Python's codecs do not know, by a name they do.
_HTML_LABELS_PYTHON_LACKS = {
    "windows-31j": "cp932", "x-sjis": "shift_jis", "windows-949": "cp949", "x-gbk": "gbk",
    "x-mac-cyrillic": "mac-cyrillic", "iso-8859-8-i": "iso-8859-8",
    "csiso88598i": "iso-8859-8", "logical": "iso-8859-8", "x-x-big5": "big5",
    "cn-big5": "big5", "x-euc-jp": "euc-jp", "unicode-1-1-utf-8": "utf-8",
    "unicode11utf8": "utf-8", "unicode20utf8": "utf-8", "x-unicode20utf8": "utf-8",
}  # fmt: skip
# Python's name of a declared encoding -> the codec the page is decoded with.
_HTML_DECODERS = {
    codecs.lookup(label).name: codecs.lookup(encoding).name
    for label, encoding in [
        *((name, name) for name in _HTML_STANDARD_ENCODINGS.split()),
        *_HTML_STANDARD_REMAPS.items(),
    ]
}


def _html_encoding(data: bytes) -> str:
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    match = _META_CHARSET.search(data[:8192])
    if match is None:
        return "utf-8"
    label = match[1].decode("ascii").lower()
    try:
        name = codecs.lookup(_HTML_LABELS_PYTHON_LACKS.get(label, label)).name
    except LookupError:
        return "utf-8"
    # Any other label, as one Python does not know: UTF-8 (a <meta> cannot really declare
    # UTF-16 either: the bytes it was read from are ASCII-compatible).
    return _HTML_DECODERS.get(name, "utf-8")


def _is_chrome(element: lxml.etree._Element, keys: list[str], *, page_level: bool) -> bool:
    """Whether ``element`` is site chrome; ``keys``: its attributes' names (most elements
    have none to look up); ``page_level``: walked outside a main element."""
    tag = element.tag
    classes = element.get("class") if "class" in keys else None
    if classes is not None and not _CHROME_CLASSES.isdisjoint(classes.split()):
        return True
    if tag in _CHROME_TAGS or ("id" in keys and element.get("id") in _CHROME_IDS):
        return True
    role = element.get("role") if "role" in keys else None
    if role is not None and role.strip().lower() in _CHROME_ROLES:
        return True
    if not page_level:
        return False
    if tag in _PAGE_CHROME_TAGS:
        return True
    if role is not None and role.strip().lower() in _PAGE_CHROME_ROLES:
        return True
    if tag in ("header", "footer"):
        return not any(parent.tag in _SECTIONING for parent in element.iterancestors())
    return classes is not None and not _PAGE_CHROME_CLASSES.isdisjoint(classes.split())


def _main_element(root: lxml.etree._Element) -> lxml.etree._Element:
    """The page's main content: its one <main> (or role=main), else the content column of
    Django's documentation theme, else its one <article>, else the whole page."""
    mains: list[lxml.etree._Element] = []
    columns: list[lxml.etree._Element] = []
    articles: list[lxml.etree._Element] = []
    # One pass over the block elements that carry these, not an XPath per kind over every
    # element: on Django's pages the XPaths cost as much as parsing.
    for element in root.iter("main", "div", "section", "article"):
        if element.tag == "main" or element.get("role") == "main":
            mains.append(element)
        elif element.get("id") == "yui-main":
            columns.append(element)
        elif element.tag == "article":
            articles.append(element)
    for found in (mains, columns, articles):
        if len(found) == 1:
            return found[0]
    return root


def _titles_in_order(root: lxml.etree._Element) -> Iterator[lxml.etree._Element]:
    """Every <title> under ``root`` in document order, the head's found without walking
    the body: ``root.iter("title")`` took 0.1 ms a page to its first (a twentieth of the
    page's extraction), the head's 6 us."""
    head = root[0] if len(root) and root[0].tag == "head" else None
    if head is None:
        yield from root.iter("title")
        return
    yield from head.iter("title")
    for following in head.itersiblings():
        yield from following.iter("title")


def _html_root(data: bytes) -> lxml.etree._Element | None:
    """The page's parsed tree. Bytes that are already clean UTF-8 (no NUL, no BOM: most
    pages) go to libxml2 as they are, told their encoding: it parses bytes a quarter
    faster than a Python string, which it must first encode again. Anything else is
    decoded as the page says (invalid bytes replaced), cleaned, and parsed as text: the
    same tree either way for clean UTF-8 (``bench.extraction_check`` over Debian's pages)."""
    encoding = _html_encoding(data)
    if encoding == "utf-8" and b"\x00" not in data and not data.startswith(codecs.BOM_UTF8):
        try:
            data.decode("utf-8")  # strict: a C pass that only validates
        except UnicodeDecodeError:
            pass
        else:
            return _html_parse(data, utf8=True)
    if encoding != "utf-16":
        # Only here, where the bytes are not clean UTF-8: text in any encoding a page may
        # declare has no control bytes but white space; a binary file is full of them.
        controls = len(data) - len(data.translate(None, _BINARY_CONTROL_BYTES))
        if controls >= _BINARY_MIN_CONTROLS and controls * 100 > len(data):
            raise ExtractionError(
                f"not an HTML text file: {controls * 100 // len(data)}% of its bytes are "
                "control bytes (a binary file, or UTF-16 without a byte order mark?)"
            )
    # libxml2's HTML parser (lxml) rather than BeautifulSoup's html.parser: about 20x faster.
    text = _sanitize(data.decode(encoding, errors="replace"))
    # XHTML pages open with <?xml ... encoding=...?>, which lxml refuses in a str.
    text = _XML_DECLARATION.sub("", text.lstrip("\ufeff"), count=1)
    return _html_parse(text, utf8=False)


def _html_parse(source: str | bytes, *, utf8: bool) -> lxml.etree._Element | None:
    parsers = getattr(_html_parsers, "pair", None)
    if parsers is None:
        parsers = _html_parsers.pair = (_HTML_PARSER.copy(), _UTF8_HTML_PARSER.copy())
    parser = parsers[utf8]
    root = lxml.etree.fromstring(source, parser=parser)
    # A resource limit stops libxml2 where it is met, and recovery hands back the tree up
    # to there: the page would be stored cut off. Only nesting can still exceed it.
    for error in parser.error_log:
        if error.type_name == "ERR_RESOURCE_LIMIT":
            raise ExtractionError(
                f"HTML is nested more than {_HTML_MAX_DEPTH:,} elements deep; the parser "
                "cannot read past that (unclosed tags?)"
            )
    return root


def _extract_html(data: bytes) -> tuple[str | None, str]:
    try:
        root = _html_root(data)
    except (lxml.etree.LxmlError, ValueError) as exc:
        raise ExtractionError("HTML file has no readable text") from exc
    if root is None:  # nothing but whitespace or comments
        raise ExtractionError("HTML file has no readable text")
    title: str | None = None
    for candidate in _titles_in_order(root):
        if not any(parent.tag == "svg" for parent in candidate.iterancestors()):
            title = _clean_title("".join(candidate.itertext())) or None
            if title:
                break
    if title is None:
        for h1 in root.iter("h1"):
            if not any(parent.tag in _DROPPED_TAGS for parent in h1.iterancestors()):
                title = _clean_title("".join(h1.itertext())) or None
                break

    blocks: list[str] = []
    buffer: list[str] = []
    pre_depth = 0
    # The body is Markdown (ADR 0026): headings as "#", <pre> fenced, inline code in
    # backticks, and text escaped where Markdown would misread it.
    code_starts: list[int] = []
    emphasis_starts: list[int] = []

    def flush() -> None:
        text = "".join(buffer)
        buffer.clear()
        if pre_depth:
            text = text.replace(_CELL_END, " ")
            block = "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")
            block = fenced(block.split("\n")) if block.strip() else ""
        elif _LINE_BREAK not in text and _CELL_END not in text:
            block = " ".join(text.split())  # a paragraph: one line of one cell
        else:
            lines = []
            for line in text.split(_LINE_BREAK):
                cells = (" ".join(cell.split()) for cell in line.split(_CELL_END))
                lines.append(" | ".join(cell for cell in cells if cell))
            block = "\n".join(lines).strip("\n")
        if block.strip():
            blocks.append(block)

    def add_text(value: str | None) -> None:
        if value:
            if pre_depth:
                buffer.append(value)
                return
            # Whitespace runs collapse to one space. A printable text has no whitespace
            # but single spaces to collapse (every other whitespace character is a control
            # or a separator): one C pass, no regular expression, for most text nodes.
            if not value.isprintable() or "  " in value:
                value = _collapse_whitespace(value)
            buffer.append(value if code_starts else escape_text(value))

    # An explicit stack, not recursion: real-world HTML can nest deeper than Python's limit.
    # Each element is visited entering and leaving; its tail (the text after it, inside its
    # parent) is added after leaving, or right away when the element itself is skipped.
    main = _main_element(root)
    page_level = main is root
    # An element is entered when popped itself, and left when popped as a 1-tuple (pushed
    # on entering, under its children): no tuple per child.
    stack: list[lxml.etree._Element | tuple[lxml.etree._Element]] = [main]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            node, entering = item[0], False
        else:
            node, entering = item, True
        name = node.tag
        if not isinstance(name, str):  # comments, processing instructions, entities
            add_text(node.tail)
            continue
        if entering:
            keys = node.keys()
            if (
                name in _DROPPED_TAGS
                or "hidden" in keys
                or _is_chrome(node, keys, page_level=page_level)
            ):
                add_text(node.tail)
                continue
            if name not in _MARKED_TAGS:  # <span>, <a>...: only their text
                stack.append((node,))
                add_text(node.text)
                stack.extend(reversed(node))
                continue
            if name == "br":
                buffer.append(_LINE_BREAK)
                add_text(node.tail)
                continue
            if name in _BLOCK_TAGS:
                flush()
            pre_depth += name == "pre"
            if name in _HEADING_TAGS and not pre_depth:
                buffer.append("#" * int(name[1]) + " ")
            if name in _CODE_TAGS and not pre_depth:
                code_starts.append(len(buffer))
            if name in _EMPHASIS_TAGS and not pre_depth and not code_starts:
                emphasis_starts.append(len(buffer))
            stack.append((node,))
            add_text(node.text)
            stack.extend(reversed(node))
        elif name not in _MARKED_TAGS:
            add_text(node.tail)
        else:
            if name in _EMPHASIS_TAGS and not pre_depth and not code_starts and emphasis_starts:
                start = emphasis_starts.pop()
                inner = "".join(buffer[start:])
                words = inner.strip()
                # Words holding a delimiter, an escape or a code span could pair with the
                # marks (their escapes depend on context): those stay plain words.
                plain = not words or any(mark in words for mark in "*_\\`")
                if not plain and _LINE_BREAK not in inner and _CELL_END not in inner:
                    # Spaces stay outside the delimiters, or they would not emphasize.
                    mark = _EMPHASIS_TAGS[name]
                    lead = inner[: len(inner) - len(inner.lstrip())]
                    trail = inner[len(inner.rstrip()) :]
                    buffer[start:] = [f"{lead}{mark}{words}{mark}{trail}"]
            if name in _CODE_TAGS and not pre_depth and code_starts:
                start = code_starts.pop()
                code = "".join(buffer[start:])
                del buffer[start:]
                if code.strip():
                    # Spaces stay outside the span; a code span in a code span is one.
                    buffer.append(code if code_starts else code_span(code.strip()))
                    buffer.append(" " if code != code.rstrip() else "")
            if name in _BLOCK_TAGS:
                flush()
            pre_depth -= name == "pre"
            if name in _CELL_TAGS:
                buffer.append(_CELL_END)
            add_text(node.tail)
    flush()

    body = _normalize_body("\n\n".join(blocks))
    if not body.strip():
        raise ExtractionError("HTML file has no readable text")
    return title, body


_XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*>")
# lxml.etree's parser, not lxml.html's: plain elements, without a Python class looked up per
# element (HtmlElement's methods are not needed here).
# huge_tree: libxml2's default limits (255 levels of nesting, 10 MB of text in one node)
# cut real pages short; with it, 2,048 levels and no limit on text under MAX_FILE_BYTES.
# The walk over the tree is iterative, so depth costs it nothing.
_HTML_PARSER = lxml.etree.HTMLParser(
    remove_comments=True, remove_pis=True, recover=True, huge_tree=True
)
_UTF8_HTML_PARSER = lxml.etree.HTMLParser(
    remove_comments=True, remove_pis=True, recover=True, encoding="utf-8", huge_tree=True
)
_HTML_MAX_DEPTH = 2048
# A parser's error log is its last parse's, shared by every thread using it: each thread
# reads its own parse's errors from parsers of its own.
_html_parsers = threading.local()
# More than 1% of a file's bytes, and at least this many (a stray one in a short page).
_BINARY_MIN_CONTROLS = 16
# C0 controls but the white space ones (tab, line feed, form feed, carriage return) and
# ESC (ISO-2022-JP's shifts).
_BINARY_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


# -------------------------------------------------------------------------- PDF

# A first line longer than this is a sentence, not a title.
_MAX_FIRST_LINE_TITLE = 150


# PDFium is not thread-safe: one document at a time in this process.
_PDFIUM_LOCK = threading.Lock()


def _extract_pdf(data: bytes) -> tuple[str | None, str]:
    with _PDFIUM_LOCK:
        return _extract_pdf_locked(data)


def _extract_pdf_locked(data: bytes) -> tuple[str | None, str]:
    # pypdfium2 (Google's PDFium): about 10x faster than pypdf on real manuals, same text.
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise ExtractionError("PDF is password-protected") from exc
        raise ExtractionError(f"not a readable PDF ({message})") from exc
    try:
        metadata_title = document.get_metadata_dict(skip_empty=True).get("Title")
        pages: list[str] = []
        for page in document:
            textpage = page.get_textpage()
            try:
                pages.append(_split_font_joins(textpage, textpage.get_text_range()))
            finally:
                textpage.close()
                page.close()
    except pdfium.PdfiumError as exc:
        raise ExtractionError(f"not a readable PDF ({exc})") from exc
    finally:
        document.close()

    body = _normalize_body(_sanitize("\n\n".join(_normalize_body(page) for page in pages)))
    if not body.strip():
        raise ExtractionError("PDF has no extractable text (scanned images need OCR first)")
    title = _clean_title(metadata_title)
    if not title:
        # Most PDFs from TeX carry no /Title: their first line is the title page's.
        first = body.lstrip().split("\n", 1)[0].strip()
        title = first if len(first) <= _MAX_FIRST_LINE_TITLE else ""
    return title or None, body


# A letter then a capital, e.g. "GNOMEThe": only here can a font change mean a lost space.
_LETTER_THEN_CAPITAL = re.compile(r"[^\W\d_](?=[A-Z])")


def _split_font_joins(textpage: pdfium.PdfTextPage, text: str) -> str:
    """Put a space where the font changes between a letter and a capital.

    Some generators set a term and its description in different fonts with no gap at all
    (DocBook's bibliography: "GNOME" then italic "The GNOME desktop"): the glyphs touch, so
    no extractor sees a space. A change of font between a letter and a capital is such a
    boundary; inside a word ("JavaScript") the font stays the same.
    """
    cuts = [match.end() for match in _LETTER_THEN_CAPITAL.finditer(text)]
    if not cuts:
        return text
    buffer = ctypes.create_string_buffer(128)

    def font(index: int) -> bytes | None:
        # Text and character indices agree unless the page has characters outside the BMP.
        if pdfium_c.FPDFText_GetUnicode(textpage.raw, index) != ord(text[index]):
            return None
        flags = ctypes.c_int()
        length = pdfium_c.FPDFText_GetFontInfo(textpage.raw, index, buffer, 128, flags)
        return buffer.raw[:length] if length else None

    parts: list[str] = []
    start = 0
    for cut in cuts:
        before, after = font(cut - 1), font(cut)
        if before is not None and after is not None and before != after:
            parts.append(text[start:cut])
            start = cut
    if not parts:
        return text
    parts.append(text[start:])
    return " ".join(parts)


# ------------------------------------------------------------- Office documents


# What an Office file may unpack to, all its members together. Real files stay far below
# (images do not compress; a 500-page .docx is about 10 MB of XML); a zip bomb (1 MB of
# zeros inflating to 1 GB) does not, and python-pptx reads every member whole.
MAX_UNPACKED_BYTES = 200 * 1024 * 1024
_ZIP_STORED, _ZIP_DEFLATED = 0, 8
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")
_INFLATE_STEP = 1024 * 1024
# An encrypted Office file is not a zip but an OLE compound file, as are .doc/.xls/.ppt.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _read_office(kind: str, data: bytes, read: Callable[[io.BytesIO], _T]) -> _T:
    """``read(stream)``, once the zip is known to unpack to at most MAX_UNPACKED_BYTES;
    whatever the library raises on a damaged file is an ``ExtractionError`` on one line."""
    if data.startswith(_OLE_MAGIC):
        raise ExtractionError(
            f"not a readable {kind} file (it is password-protected, or an old binary Office "
            "file renamed: save it without a password in the current format)"
        )
    _check_unpacked_size(kind, data)
    try:
        return read(io.BytesIO(data))
    except ExtractionError:
        raise
    # The libraries raise whatever zipfile / their XML parsing raises on damaged files,
    # while opening and while reading (openpyxl parses each sheet as it is iterated).
    except Exception as exc:
        reason = _collapse_whitespace(f"{type(exc).__name__}: {exc}").strip()
        raise ExtractionError(f"not a readable {kind} file ({reason})") from exc


def _check_unpacked_size(kind: str, data: bytes) -> None:
    """Refuse a zip whose members unpack to more than MAX_UNPACKED_BYTES, before any
    library inflates one.

    The sizes the zip's directory declares are summed; each member is then inflated here,
    a megabyte at a time and thrown away, to check that it holds what it declares: zipfile
    inflates a member in one call and only then cuts it at its declared size, so a member
    declaring 4 KB and holding 1 GB took a gigabyte of memory.
    """
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ExtractionError(f"not a readable {kind} file (BadZipFile: {exc})") from exc
    members = archive.infolist()
    declared = sum(member.file_size for member in members)
    if declared > MAX_UNPACKED_BYTES:
        raise ExtractionError(
            f"the {kind} file would unpack to {declared / (1024 * 1024):,.1f} MB (the limit "
            f"is {MAX_UNPACKED_BYTES // (1024 * 1024)} MB): a zip bomb, or too large to read"
        )
    for member in members:
        if not _member_holds_what_it_declares(data, member):
            raise ExtractionError(
                f"not a readable {kind} file (its member {member.filename!r} does not hold "
                "the size its zip directory declares)"
            )


def _member_holds_what_it_declares(data: bytes, member: zipfile.ZipInfo) -> bool:
    if member.flag_bits & 0x1:  # encrypted: no Office application writes these
        return False
    header = data[member.header_offset : member.header_offset + _ZIP_LOCAL_HEADER.size]
    if len(header) < _ZIP_LOCAL_HEADER.size:
        return False
    signature, name_length, extra_length = _ZIP_LOCAL_HEADER.unpack(header)
    if signature != b"PK\x03\x04":
        return False
    start = member.header_offset + _ZIP_LOCAL_HEADER.size + name_length + extra_length
    packed = data[start : start + member.compress_size]
    if len(packed) < member.compress_size:
        return False
    if member.compress_type == _ZIP_STORED:
        return member.compress_size == member.file_size
    if member.compress_type != _ZIP_DEFLATED:  # bzip2, LZMA: not Office's, and unbounded
        return False
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    left = member.file_size
    pending = packed
    try:
        while pending and not inflater.eof:
            left -= len(inflater.decompress(pending, _INFLATE_STEP))
            if left < 0:
                return False
            pending = inflater.unconsumed_tail
    except zlib.error:
        return False
    return left == 0 and inflater.eof


def _table_lines(rows: Iterable[Any]) -> list[str]:
    """A table's rows as lines of text: each cell's white space folded, empty cells left
    out, the others joined by " | "."""
    lines = []
    for row in rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        lines.append(" | ".join(cell for cell in cells if cell))
    return lines


def _office_body(kind: str, blocks: Iterable[str]) -> str:
    """An Office document's body from its blocks of text (empty ones left out)."""
    body = _normalize_body(_sanitize("\n\n".join(block for block in blocks if block)))
    if not body.strip():
        raise ExtractionError(f"{kind} file has no text")
    return body


def _extract_docx(data: bytes) -> tuple[str | None, str]:
    import docx

    return _read_office(".docx", data, lambda stream: _docx_text(docx.Document(stream)))


def _docx_text(document: Any) -> tuple[str | None, str]:
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    title = document.core_properties.title or None
    first_heading: str | None = None
    blocks: list[str] = []
    paragraph_tag, table_tag = qn("w:p"), qn("w:tbl")
    for element in _docx_blocks(document.element.body):
        if element.tag == paragraph_tag:
            text = _docx_paragraph_text(element).strip()
            if text and first_heading is None:
                style = Paragraph(element, document).style
                name = (style.name if style is not None else "") or ""
                if name == "Title" or name.startswith("Heading"):
                    first_heading = text
            blocks.append(text)
        elif element.tag == table_tag:
            blocks.extend(_docx_table_lines(element))
    return title or first_heading, _office_body(".docx", blocks)


# Elements that only wrap a .docx's paragraphs, tables or runs: content controls (a
# template's fields), custom XML, tracked insertions and moves. Their content is text the
# reader sees; python-docx's iteration skipped it. Tracked deletions (w:del, w:moveFrom)
# are not among them.
_DOCX_WRAPPERS = frozenset(
    f"{{http://schemas.openxmlformats.org/wordprocessingml/2006/main}}{name}"
    for name in ("sdt", "sdtContent", "customXml", "ins", "moveTo", "hyperlink", "smartTag",
                 "fldSimple", "dir", "bdo")
)  # fmt: skip
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx_blocks(container: Any) -> Iterator[Any]:
    """The paragraphs (w:p) and tables (w:tbl) of a body or cell, in order, wrappers opened."""
    for child in container:
        if child.tag in (f"{_W}p", f"{_W}tbl"):
            yield child
        elif child.tag in _DOCX_WRAPPERS:
            yield from _docx_blocks(child)


def _docx_paragraph_text(paragraph: Any) -> str:
    """A paragraph's text as Word shows it with changes accepted: its runs (python-docx's
    ``CT_R.text``: tabs and breaks included), those in wrappers too."""
    parts: list[str] = []
    stack = list(reversed(paragraph))
    while stack:
        node = stack.pop()
        if node.tag == f"{_W}r":
            parts.append(node.text)
        elif node.tag in _DOCX_WRAPPERS:
            stack.extend(reversed(node))
    return "".join(parts)


def _docx_table_lines(table: Any) -> list[str]:
    """A table's rows as lines, as ``_table_lines``: each cell's text (its paragraphs and
    nested tables) with white space folded, empty cells left out, the rest joined by " | "."""
    lines = []
    for row in _docx_children(table, "tr"):
        cells = []
        for cell in _docx_children(row, "tc"):
            texts = []
            for block in _docx_blocks(cell):
                if block.tag == f"{_W}p":
                    texts.append(_docx_paragraph_text(block))
                else:
                    texts.extend(_docx_table_lines(block))
            cells.append(" ".join(" ".join(texts).split()))
        lines.append(" | ".join(cell for cell in cells if cell))
    return lines


def _docx_children(element: Any, name: str) -> Iterator[Any]:
    """``element``'s children named ``name`` (w:tr, w:tc), through wrappers."""
    for child in element:
        if child.tag == f"{_W}{name}":
            yield child
        elif child.tag in _DOCX_WRAPPERS:
            yield from _docx_children(child, name)


def _extract_pptx(data: bytes) -> tuple[str | None, str]:
    import pptx

    return _read_office(".pptx", data, lambda stream: _pptx_text(pptx.Presentation(stream)))


def _pptx_text(presentation: Any) -> tuple[str | None, str]:
    title = presentation.core_properties.title or None
    first_slide_title: str | None = None
    blocks: list[str] = []
    for slide in presentation.slides:
        heading = slide.shapes.title
        if heading is not None and heading.has_text_frame and first_slide_title is None:
            first_slide_title = heading.text_frame.text.strip() or None
        for shape in _pptx_shapes(slide.shapes):
            if shape.has_text_frame:
                blocks.append(shape.text_frame.text.strip())
            elif getattr(shape, "has_table", False):
                blocks.extend(_table_lines(shape.table.rows))
    return title or first_slide_title, _office_body(".pptx", blocks)


def _pptx_shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """The shapes of a slide, those inside groups too (whose text python-pptx's list of a
    slide's shapes leaves out), in order."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _pptx_shapes(shape.shapes)
        else:
            yield shape


def _extract_xlsx(data: bytes) -> tuple[str | None, str]:
    import openpyxl

    def read(stream: io.BytesIO) -> tuple[str | None, str]:
        return _xlsx_text(openpyxl.load_workbook(stream, read_only=True, data_only=True))

    return _read_office(".xlsx", data, read)


def _xlsx_text(workbook: Any) -> tuple[str | None, str]:
    try:
        title = workbook.properties.title or None
        blocks: list[str] = []
        for sheet in workbook.worksheets:
            rows = []
            for row in _sheet_rows(workbook, sheet):
                cells = [" ".join(str(v).split()) for v in row if v is not None and str(v).strip()]
                if cells:
                    rows.append(" | ".join(cells))
            if rows:
                blocks.append(sheet.title + "\n" + "\n".join(rows))
    finally:
        workbook.close()
    return title, _office_body(".xlsx", blocks)


def _sheet_rows(workbook: Any, sheet: Any) -> Iterator[list[Any]]:
    """The values of each row the sheet's XML holds, only the cells it holds.

    Not ``iter_rows``: in read-only mode it trusts the sheet's ``<dimension>``, dropping
    every cell outside a stale one, and pads each row to the widest column, so a 5 KB file
    with cells at A1 and XFD1048576 made 17 billion empty values. This is how openpyxl's
    read-only sheet parses its XML (``ReadOnlyWorksheet._cells_by_row``), without the
    padding: the time is the XML's length.
    """
    from openpyxl.worksheet._reader import WorkSheetParser

    with sheet._get_source() as source:
        parser = WorkSheetParser(
            source,
            sheet._shared_strings,
            data_only=True,
            epoch=workbook.epoch,
            date_formats=workbook._date_formats,
            timedelta_formats=workbook._timedelta_formats,
        )
        for _, cells in parser.parse():
            yield [cell["value"] for cell in cells]


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
