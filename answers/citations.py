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
from collections.abc import Callable, Iterable, Iterator, Sequence
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
        (?:\n[\s\S]*?)??(?:\n[ ]{0,3}(?P=fence_mark)(?:(?<=`)`*|(?<=~)~*)[ \t]*(?=\n|\Z)|\Z))
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
    markers: Iterable[Marker] | None = None,
) -> str:
    """Rebuild ``text`` with each marker replaced by ``replace(marker)``.

    ``None`` keeps the marker as written; ``""`` drops it together with the spaces and
    tabs before it, so "see [9]." becomes "see.".
    """
    pieces: list[str] = []
    position = 0
    for marker in iter_markers(text) if markers is None else markers:
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


def cited_numbers(text: str, markers: Iterable[Marker] | None = None) -> list[int]:
    """Distinct cited numbers in first-citation order."""
    seen: dict[int, None] = {}
    for marker in iter_markers(text) if markers is None else markers:
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

    ``sources[i]`` is prompt number ``i + 1``. Run ``strip_out_of_range_markers`` first
    (ADR 0011): out-of-range numbers never choose a source, and are dropped from markers
    when anything is cited, but the fallback below returns the text exactly as given. When
    nothing is cited, the text and sources are returned untouched (the ADR's fallback for
    providers that ignore the contract).
    """
    markers = list(iter_markers(text))  # one scan serves both passes below
    order = [n for n in cited_numbers(text, markers) if 1 <= n <= len(sources)]
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

    final_text = rewrite_markers(text, replace, markers)
    final_sources = [sources[old - 1] for old in order]
    return FinalizedCitations(final_text, final_sources, number_map, fallback=False)


# --- Streaming -------------------------------------------------------------------------
#
# While an answer streams, out-of-range markers must not reach the client either, and
# what the client sees, joined, must equal ``strip_out_of_range_markers(raw)``. A prefix of
# the raw text is emitted only once nothing that may still arrive can change how it is
# read: an unfinished ``[1`` may become a marker, a finished ``[1]`` may still become a link
# ``[1](url)``, a space may be eaten by a dropped marker after it, an open backtick may
# turn what follows it into code, ``\`` escapes the next character, ``<`` may open an
# autolink. Those tails are held back until they are settled.

_HOLD_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def _settled_length(text: str) -> int:
    """Length of the prefix of ``text`` whose stripped form can no longer change.

    Holding back too much only delays text; holding back too little would show a marker
    that the final text drops (or drop one it keeps), so every rule errs on holding.
    """
    cut = len(text)

    # Backticks: an unmatched run in the current paragraph may still be closed, and a code
    # span ending at the very end may still grow into a longer, different run.
    paragraph_start = 0
    for match in _HOLD_BLANK_LINE.finditer(text):
        paragraph_start = match.end()
    for match in _SCANNER.finditer("\n" + text):
        start, end = max(match.start() - 1, 0), match.end() - 1
        if match.start("ticks_literal") != -1 and start >= paragraph_start:
            cut = min(cut, start)
            break
        if match.start("code") != -1 and end == len(text):
            cut = min(cut, start)
            break
        if match.start("fence") != -1 and "\n" not in match.group("fence"):
            # The opening line is unfinished: a backtick in its info string would unmake it.
            cut = min(cut, start)
            break

    # Brackets on the current line: an open "[", an open link destination "](...", or a
    # complete group at the very end, which "(" or ":" may still make a link or definition.
    line_start = text.rfind("\n", 0, cut) + 1
    starts: list[int] = []
    last_group_start = last_group_end = -1
    destination_start = -1
    for index in range(line_start, cut):
        char = text[index]
        if destination_start != -1:
            if char == ")":
                destination_start = -1
            continue
        if char == "[":
            starts.append(index)
        elif char == "]" and starts:
            last_group_start, last_group_end = starts.pop(), index + 1
        elif char == "(" and index == last_group_end:
            destination_start = last_group_start
    if destination_start != -1:
        cut = min(cut, destination_start)
    if starts:
        cut = min(cut, starts[0])
    if last_group_end != -1 and not text[last_group_end:cut].strip(" \t"):
        cut = min(cut, last_group_start)

    # "<" with no ">" or space after it may open an autolink.
    angle = text.rfind("<", line_start, cut)
    if angle != -1 and not re.search(r"[\s>]", text[angle:cut]):
        cut = angle

    # An odd run of backslashes escapes whatever comes next.
    head = text[:cut]
    if (len(head) - len(head.rstrip("\\"))) % 2:
        cut -= 1

    # Never cut through a code span, link or marker: its start may read differently alone.
    # (An open fenced block reads as code either way, so it may be cut.)
    cut = len(text[:cut].rstrip(" \t"))
    for match in _SCANNER.finditer("\n" + text):
        start, end = max(match.start() - 1, 0), match.end() - 1
        if start >= cut:
            break
        if cut < end and match.start("fence") == -1:
            cut = start
            break
    # Spaces and tabs go with a marker dropped right after them.
    return len(text[:cut].rstrip(" \t"))


class MarkerStreamFilter:
    """Feed raw deltas, get back text that is safe to show: markers in ``1..count`` only.

    Joined, the output equals ``strip_out_of_range_markers(raw, count)``. ``new_citations``
    lists the numbers cited for the first time by the text emitted so far.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self._raw: list[str] = []
        self._raw_length = 0
        self._emitted = 0
        self._cited: dict[int, None] = {}

    @property
    def raw(self) -> str:
        return "".join(self._raw)

    def feed(self, delta: str) -> str:
        self._raw.append(delta)
        raw = self.raw
        self._raw = [raw]
        return self._emit(raw[: _settled_length(raw)])

    def close(self) -> str:
        return self._emit(self.raw)

    def _emit(self, settled_raw: str) -> str:
        settled = strip_out_of_range_markers(settled_raw, self.count)
        if len(settled) <= self._emitted:
            return ""
        out = settled[self._emitted :]
        self._emitted = len(settled)
        return out

    def take_new_citations(self, emitted_text: str) -> list[int]:
        """Numbers first cited in the text emitted so far (call after each emission)."""
        new = []
        for number in cited_numbers(emitted_text):
            if number not in self._cited:
                self._cited[number] = None
                new.append(number)
        return new
