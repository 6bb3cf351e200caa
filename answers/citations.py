"""The citation rules (ADR 0011), as pure functions over Markdown text.

A *marker* is ``[n]`` or a group ``[n, m]`` in prose. Text that Markdown does not treat
as prose is never read or rewritten: fenced code blocks, code spans, backslash escapes,
link and image text ``[x](url)``, footnotes ``[^1]``, link reference definitions and
autolinks. Indented code blocks are deliberately not recognised: the renderer disables
them too (see ``answers.rendering``), so both agree on what is prose.

Order matters: ``strip_out_of_range_markers`` runs before ``finalize_citations`` so that
finalize only ever sees valid 1-based indices.

No Django imports: this module is the contract, and is tested as such.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# Longer digit runs are not citations (and would make int() the slow part).
_MAX_DIGITS = 4

# Every branch opens with a literal character, so the regex engine can skip straight to
# the few characters that may start something (most of a text is never looked at twice).
# The text is scanned with a "\n" in front so line-anchored branches can open on "\n".
_SCANNER = re.compile(
    r"""
      \n(?P<fence>[ ]{0,3}(?P<fence_mark>`{3,}(?=[^`\n]*(?:\n|\Z))|~{3,})[^\n]*
        (?:\n[\s\S]*?)??(?:\n[ ]{0,3}(?P=fence_mark)[`~]*[ \t]*(?=\n|\Z)|\Z))
    | \n(?P<refdef>[ ]{0,3}\[[^\]\n]+\]:[^\n]*)
    | `(?P<code>(?P<ticks>`*+)(?:[^\n]|\n(?![ \t]*\n))*?(?<!`)`(?P=ticks)(?!`))
    | `(?P<ticks_literal>`*)
    | \\(?P<escape>[\s\S])
    | \[(?P<footnote>\^[^\]\n]*\])
    | \[(?P<link>(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\([^)\n]*\))
    | !\[(?P<image>(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\([^)\n]*\))
    | <(?P<autolink>[a-zA-Z][a-zA-Z0-9+.\-]{1,31}:[^\s<>]*>)
    | \[(?P<marker>[ ]*(?P<numbers>\d{1,%d}(?:[ ]*,[ ]*\d{1,%d})*)[ ]*\])
    """  # noqa: UP031 (a regex full of braces reads better with %)
    % (_MAX_DIGITS, _MAX_DIGITS),
    re.VERBOSE,
)
_NUMBER = re.compile(r"\d+")
# Whitespace between markers of one cluster, e.g. "[1] [1]".
_CLUSTER_GAP = re.compile(r"[ \t]*")


@dataclass(frozen=True)
class Marker:
    """A citation marker found in prose: its span in the text and the numbers it cites."""

    start: int
    end: int
    numbers: tuple[int, ...]


def iter_markers(text: str) -> Iterator[Marker]:
    """Yield every citation marker in the prose of ``text``, in order."""
    if "[" not in text:
        return
    for match in _SCANNER.finditer("\n" + text):
        if match.start("marker") != -1:
            # Offsets are shifted by one for the leading "\n".
            yield Marker(
                match.start() - 1,
                match.end() - 1,
                tuple(int(n) for n in _NUMBER.findall(match.group("numbers"))),
            )


def format_marker(numbers: Sequence[int]) -> str:
    """The one canonical spelling of a marker: ``[1]`` or ``[1, 3]``."""
    return "[" + ", ".join(str(n) for n in numbers) + "]"


def rewrite_markers(
    text: str,
    replace: Callable[[Marker], str | None],
) -> str:
    """Rebuild ``text`` with each marker replaced by ``replace(marker)``.

    ``None`` keeps the marker as written; ``""`` drops it together with the spaces and
    tabs before it, so "see [9]." becomes "see.".
    """
    pieces: list[str] = []
    position = 0
    for marker in iter_markers(text):
        replacement = replace(marker)
        if replacement is None:
            continue
        between = text[position : marker.start]
        if replacement == "":
            between = between.rstrip(" \t")
        pieces.append(between)
        pieces.append(replacement)
        position = marker.end
    if not pieces:
        return text
    pieces.append(text[position:])
    return "".join(pieces)


def strip_out_of_range_markers(text: str, count: int) -> str:
    """Remove every cited number outside ``1..count``.

    A group keeps its valid numbers (``[1, 9]`` becomes ``[1]``); a marker with none
    left is removed with the whitespace before it. Valid markers are left as written.
    """

    def replace(marker: Marker) -> str | None:
        kept = [n for n in marker.numbers if 1 <= n <= count]
        if len(kept) == len(marker.numbers):
            return None
        return format_marker(kept) if kept else ""

    return rewrite_markers(text, replace)


def cited_numbers(text: str) -> list[int]:
    """Distinct cited numbers in first-citation order."""
    seen: dict[int, None] = {}
    for marker in iter_markers(text):
        for number in marker.numbers:
            seen.setdefault(number, None)
    return list(seen)


@dataclass(frozen=True)
class FinalizedCitations(Generic[T]):
    """The corrected text and its sources.

    ``number_map`` maps each prompt number that was cited to its final number;
    ``fallback`` is true when the text cited nothing and the sources were kept as given.
    """

    text: str
    sources: list[T]
    number_map: dict[int, int]
    fallback: bool


def finalize_citations(text: str, sources: Sequence[T]) -> FinalizedCitations[T]:
    """Keep only cited sources, renumbered in first-citation order, and rewrite markers.

    ``sources[i]`` is prompt number ``i + 1``. Markers must already be in range (run
    ``strip_out_of_range_markers`` first); any that are not are dropped here too, so the
    result never cites a missing source. When nothing is cited, the text and sources are
    returned untouched (the ADR's fallback for providers that ignore the contract).
    """
    order = [n for n in cited_numbers(text) if 1 <= n <= len(sources)]
    if not order:
        return FinalizedCitations(text, list(sources), {}, fallback=True)
    number_map = {old: new for new, old in enumerate(order, start=1)}

    # Markers are rewritten one cluster at a time ("[2][2]" or "[1] [1, 2]" are clusters),
    # so a number repeated within a cluster is said once.
    last_end = -1
    cluster: set[int] = set()

    def replace(marker: Marker) -> str:
        nonlocal last_end, cluster
        contiguous = last_end >= 0 and _CLUSTER_GAP.fullmatch(text, last_end, marker.start)
        if not contiguous:
            cluster = set()
        last_end = marker.end
        numbers: list[int] = []
        for old in marker.numbers:
            new = number_map.get(old)
            if new is not None and new not in cluster:
                cluster.add(new)
                numbers.append(new)
        return format_marker(numbers) if numbers else ""

    final_text = rewrite_markers(text, replace)
    final_sources = [sources[old - 1] for old in order]
    return FinalizedCitations(final_text, final_sources, number_map, fallback=False)
