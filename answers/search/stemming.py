"""The stemmer both built-in backends index and search with: Snowball English (Porter2).

FTS5's own ``porter`` tokenizer is the original Porter algorithm, which folds unrelated
words into one stem ("generators" and "General" both become ``gener``, so a question about
generators matched every licence text; ADR 0013). PostgreSQL's ``english`` configuration
is Snowball already. On SQLite the text is stemmed here, in Python, by the index triggers
(through the SQL function ``answers_stem``, registered on every connection) and for the
query, and FTS5 only splits the stems on spaces (``unicode61``, no ``porter``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

import Stemmer

SQL_FUNCTION = "answers_stem"
# FTS5's unicode61 split (letters and digits; everything else separates), as query_terms.
_TOKEN = re.compile(r"[^\W_]+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_local = threading.local()  # a PyStemmer object is not safe to share between threads


def _stemmer() -> Any:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


_combining: dict[int, None] = {}


def _combining_marks() -> dict[int, None]:
    """Every combining code point, mapped to None for ``str.translate`` (built once, ~0.1 s):
    one C-level pass per text instead of a Python call per character (profiled: 10.6M calls
    for 2,500 HTML pages)."""
    if not _combining:
        marks = {cp: None for cp in range(sys.maxunicode + 1) if unicodedata.combining(chr(cp))}
        _combining.update(marks)
    return _combining


def _fold_run(match: re.Match[str]) -> str:
    return unicodedata.normalize("NFKD", match[0]).translate(_combining_marks())


def _fold(text: str) -> str:
    """Lower-cased, without diacritics ("café" matches "cafe", as remove_diacritics 2)."""
    text = text.lower()
    if text.isascii():  # most text, and NFKD leaves ASCII as it is: no per-character pass
        return text
    # Only the non-ASCII runs: ASCII characters decompose to themselves and never reorder
    # with combining marks (their class is 0), so NFKD run by run equals NFKD of the whole.
    return _NON_ASCII.sub(_fold_run, text)


def stem_text(text: str | None) -> str:
    """``text`` as the index stores it: its words' stems, one space apart, in order (so a
    chunk keeps its length in tokens)."""
    if not text:
        return ""
    known = getattr(_local, "known", None)
    if known is not None:
        stems = known.get(text)
        if stems is not None:
            return stems
    return " ".join(_stemmer().stemWords(_TOKEN.findall(_fold(text))))


@contextlib.contextmanager
def stems_known(stems: Mapping[str, str]) -> Iterator[None]:
    """While open, ``stem_text`` (and so the index triggers, in this thread) returns these
    stems of these texts without stemming them again: ingest stems chunks in its worker
    processes and the writer only looks them up. ``stems`` must be ``stem_text``'s own."""
    previous = getattr(_local, "known", None)
    _local.known = stems
    try:
        yield
    finally:
        _local.known = previous


def register_sqlite_function(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: the triggers of migration 0007 call the stemmer."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(SQL_FUNCTION, 1, stem_text, deterministic=True)
