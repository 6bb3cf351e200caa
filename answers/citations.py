"""The citation rules (ADR 0004, 0011), as pure functions over Markdown text.

A *marker* is a bracketed citation that the answer's reader sees as text: ``[1]``,
``[1, 3]``, a range ``[1-3]`` (also with an en or em dash), and the full-width and
lenticular forms (U+FF3B/FF3D, U+3010/3011) that some models write, with any decimal
digits. What "seen as text" means has exactly
one definition: the renderer's parser. ``markdown_parser()`` builds the markdown-it
configuration that ``answers.rendering`` renders with, and an inline rule added to it
claims a marker at the point where markdown-it would otherwise emit those characters as
plain text. So a ``[n]`` in code (fenced anywhere, in a list or a quote, or a code span),
link text or destination, an image description, an autolink, or after a backslash is
never a marker, and the rules and the page cannot disagree (ADR 0004).

Two choices make that definition usable while an answer streams (ADR 0005):

* Link reference definitions are off, so ``[1]: …`` is prose. They are the one construct
  that changes how text far away from it reads: a definition at the end of an answer
  would turn every earlier ``[1]`` into a link after it had been shown as a citation.
* Indented code is off (as it always was): indented prose stays prose.

Numbers have at most three digits, so ``[2025]`` is a year, not a citation (no answer
has that many sources). Order matters: ``strip_out_of_range_markers`` runs before
``finalize_citations`` so that finalize only ever sees valid 1-based numbers.

No Django imports: this module is the contract, and is tested as such.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from markdown_it import MarkdownIt
from markdown_it.common.utils import isMdAsciiPunct, isPunctChar, isWhiteSpace
from markdown_it.rules_core import StateCore
from markdown_it.rules_inline import StateInline, backtick, image, link
from markdown_it.token import Token

T = TypeVar("T")

MAX_NUMBER_DIGITS = 3
# A range wider than this is not expanded past it (no answer has that many sources).
MAX_RANGE_SPAN = 100

_SPACE = "[ \u3000]*"
_ITEM = r"\d{1,%d}(?:%s[-\u2013\u2014]%s\d{1,%d})?" % (  # noqa: UP031
    MAX_NUMBER_DIGITS,
    _SPACE,
    _SPACE,
    MAX_NUMBER_DIGITS,
)
_BODY = f"{_SPACE}{_ITEM}(?:{_SPACE}[,\uff0c\u3001]{_SPACE}{_ITEM})*{_SPACE}"
# ASCII, full-width and lenticular brackets; each opener with its own closer. No branch
# can contain another's opener, so matches never overlap (``iter_markers`` relies on it).
_MARKER = re.compile(rf"\[(?:{_BODY})\]|\uff3b(?:{_BODY})\uff3d|\u3010(?:{_BODY})\u3011")
MARKER_RE = _MARKER  # the shape of a marker; where it is one is the parser's business
_OPENERS = frozenset("[\uff3b\u3010")
_RANGE = re.compile(r"(\d+)[ \u3000]*[-\u2013\u2014][ \u3000]*(\d+)")
_NUMBER = re.compile(r"\d+")
# Whitespace between markers of one cluster, e.g. "[1] [1]".
_CLUSTER_GAP = re.compile(r"[ \t]*")
# After a dropped marker: what may follow for the spaces before it to go too ("see [9]."
# becomes "see."). Anything else keeps them, so no two characters become neighbours that
# could start something together (two backtick runs, "<" and ">", "\\" and a letter).
_SPACES_GO_BEFORE = frozenset(" \t\r\n.,;:!?")
# Neighbours that could start something together once a marker between them is gone:
# one run of backticks, an autolink, an entity, a link or an image.
_JOINS_LEFT = frozenset("<&")
_JOINS_RIGHT = frozenset(">")
_ENTITY_REST = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ#;")
_JOINS = frozenset({("`", "`"), ("]", "("), ("!", "["), ("*", "*"), ("_", "_"), ("~", "~")})
# An emphasis or strikethrough delimiter run (see ``_closing_run``).
_DELIMITER_RUN = re.compile(r"\*+|_+|~+")
# A line whose remains, once its markers are dropped, are only these could turn into
# something else (a blank line, an empty list item, a setext underline): a marker on such
# a line leaves a zero-width space instead, so the structure of the answer never changes.
_STRUCTURAL_ONLY = re.compile(r"[ \t>*+\-=_#~`\d.)|:]*")
# A line's structure and markers: what ``_STRUCTURAL_ONLY`` reads once markers are dropped.
_STRUCTURE_AND_MARKERS = re.compile(rf"(?:[ \t>*+\-=_#~`\d.)|:]|{_MARKER.pattern})*")
# A line that may underline the line above it (setext) or be a table's delimiter row.
# Possessive, so no run is tried at every split ("- - - ... x" was quadratic).
_UNDERLINE = re.compile(r"[ \t]*+(?:=++|[|: \t]*+-[-|: \t]*+)[ \t\r]*+")
ZERO_WIDTH_SPACE = "\u200b"
ENV_KEY = "answers.citations"  # markdown-it env entry that carries a collector


@dataclass(frozen=True)
class Marker:
    """A citation marker found in prose: its span in the text and the numbers it cites."""

    start: int
    end: int
    numbers: tuple[int, ...]


def _numbers(marker_text: str) -> tuple[int, ...]:
    numbers: list[int] = []
    body = marker_text[1:-1]
    for item in re.split("[,\uff0c\u3001]", body):
        span = _RANGE.search(item)
        if span:
            first, last = int(span[1]), int(span[2])
            if first <= last:
                numbers.extend(range(first, min(last, first + MAX_RANGE_SPAN) + 1))
            else:  # "[3-1]" is read as the two numbers it names
                numbers.extend((first, last))
        else:
            numbers.append(int(_NUMBER.search(item)[0]))  # type: ignore[index]
    return tuple(numbers)


# --- The parser ------------------------------------------------------------------------


class _Collector:
    """Rides in markdown-it's ``env`` and hears about markers (and, for streaming, the
    places where text still to come could change how earlier text reads)."""

    def __init__(self, *, hazards: bool = False) -> None:
        self.want_hazards = hazards
        self.content: str | None = None
        # Per inline token, in document order: the token, its markers (content start,
        # end, numbers) and its hazards (content offsets; at-end ones stored as -offset-1).
        self.blocks: list[tuple[Token, list[tuple[int, int, tuple[int, ...]]], list[int]]] = []

    def begin(self, token: Token) -> None:
        self.content = token.content
        self.blocks.append((token, [], []))

    def marker(self, state: StateInline, end: int, numbers: tuple[int, ...]) -> None:
        self.blocks[-1][1].append((state.pos, end, numbers))
        state.append_pending(state.src[state.pos : end])

    def hazard(self, position: int, *, at_end: bool = False) -> None:
        # ``at_end``: a hazard only while nothing at all follows the block's text.
        self.blocks[-1][2].append(-position - 1 if at_end else position)


class RenderCollector(_Collector):
    """The renderer's collector: markers become ``citation`` tokens."""

    def marker(self, state: StateInline, end: int, numbers: tuple[int, ...]) -> None:
        token = state.push("citation", "", 0)
        token.content = state.src[state.pos : end]
        token.meta = {"numbers": numbers}


def _collector(state: StateInline) -> _Collector | None:
    collector = state.env.get(ENV_KEY) if state.env is not None else None
    # Only the pass over a block's own text counts: link text (linkLevel) and image
    # descriptions (a separate parse of another string) are not prose.
    if collector is None or state.linkLevel or state.src is not collector.content:
        return None
    return collector


def _citation_rule(state: StateInline, silent: bool) -> bool:
    # Runs after link and image: a "[" that starts neither is text, and may be a marker.
    if silent or state.src[state.pos] not in _OPENERS:
        return False  # silent: link labels are measured exactly as markdown-it does
    collector = _collector(state)
    if collector is None:
        return False
    match = _MARKER.match(state.src, state.pos, state.posMax)
    if match is None:
        if collector.want_hazards:
            _bracket_hazard(state, collector)
        return False
    if collector.want_hazards:
        # "(url)" may still make it a link: right after it, or once the "(" is complete.
        if match.end() == state.posMax:
            collector.hazard(state.pos, at_end=True)
        elif state.src[match.end()] == "(":
            collector.hazard(state.pos)
    collector.marker(state, match.end(), _numbers(match[0]))
    state.pos = match.end()
    return True


def _bracket_hazard(state: StateInline, collector: _Collector) -> None:
    """A "[" that is text now may start a link or a marker once more text arrives."""
    if state.src[state.pos] != "[":
        # A full-width opener only matters while its marker may still be completing.
        rest = state.src[state.pos + 1 : state.posMax]
        if rest.strip(" \u30000123456789,-\u2013\u2014\uff0c\u3001") == "" or not rest:
            collector.hazard(state.pos)
        return
    label_end = state.md.helpers.parseLinkLabel(state, state.pos, True)
    if label_end < 0 or (label_end + 1 < state.posMax and state.src[label_end + 1] == "("):
        collector.hazard(state.pos)
    elif label_end + 1 >= state.posMax:
        collector.hazard(state.pos, at_end=True)


def _backticks_with_hazards(state: StateInline, silent: bool) -> bool:
    start, tokens = state.pos, len(state.tokens)
    matched = backtick(state, silent)
    if matched and not silent:
        collector = _collector(state)
        # An unmatched run may still be closed; a span ending at the very end may still
        # grow into a longer, different run.
        if collector is not None and collector.want_hazards:
            if len(state.tokens) == tokens:
                collector.hazard(start)
            elif state.pos == state.posMax:
                collector.hazard(start, at_end=True)
    return matched


def _label_hazards(
    rule: Callable[[StateInline, bool], bool], opener: int
) -> Callable[[StateInline, bool], bool]:
    """``rule`` (link or image), and a hazard where its label holds a backtick or ``<``:
    the label is measured skipping code spans and autolinks, so one that closes later can
    swallow the label's ``]`` and unmake the link ("[`](u)[1]" then "a`" is no link, and
    its [1] code). ``opener`` is the length of "[" or "!["."""

    def wrapped(state: StateInline, silent: bool) -> bool:
        start = state.pos
        matched = rule(state, silent)
        if matched and not silent:
            collector = _collector(state)
            if collector is not None and collector.want_hazards:
                end = state.md.helpers.parseLinkLabel(state, start + opener - 1, opener == 1)
                if end > start and re.search("[`<]", state.src[start + opener : end]):
                    collector.hazard(start)
        return matched

    return wrapped


def _tail_hazards(state: StateInline, silent: bool) -> bool:
    # Last inline rule: "<" that may still become an autolink, "\\" that may still escape.
    if silent:
        return False
    char = state.src[state.pos]
    if char not in "<\\":
        return False
    collector = _collector(state)
    if collector is not None and collector.want_hazards:
        rest = state.src[state.pos + 1 : state.posMax]
        if char == "\\" and not rest:
            collector.hazard(state.pos, at_end=True)
        elif char == "<" and not re.search(r"[\s<>]", rest):
            collector.hazard(state.pos)
    return False


def _inline_core(state: StateCore) -> None:
    # markdown-it's own "inline" core rule, telling the collector which block is parsed.
    collector = state.env.get(ENV_KEY)
    for token in state.tokens:
        if token.type == "inline":
            if token.children is None:
                token.children = []
            if collector is not None:
                collector.begin(token)
            state.md.inline.parse(token.content, state.md, state.env, token.children)


def markdown_parser() -> MarkdownIt:
    """The answer renderer's markdown-it, with the marker rule: the one definition of prose."""
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table").enable("strikethrough")
    md.disable(["code", "reference"])
    for opener in _OPENERS:
        md.inline.add_terminator_char(opener)
    md.inline.ruler.at("backticks", _backticks_with_hazards)
    md.inline.ruler.at("link", _label_hazards(link, 1))
    md.inline.ruler.at("image", _label_hazards(image, 2))
    md.inline.ruler.after("image", "citation", _citation_rule)
    md.inline.ruler.push("citation_hazards", _tail_hazards)
    md.core.ruler.at("inline", _inline_core)
    return md


_MARKDOWN = markdown_parser()


def parse_markdown(text: str, env: MutableMapping[str, Any]) -> list[Token]:
    """Parse ``text`` with the shared configuration (``env`` may carry a collector)."""
    return _MARKDOWN.parse(text, env)


# --- Analysis ---------------------------------------------------------------------------


@dataclass
class _Analysis:
    text: str
    markers: list[Marker]
    hazard: int  # first position whose reading may still change (streaming only)
    line_starts: list[int]
    blocks: list[tuple[int, int]] = field(default_factory=list)  # top-level line ranges
    fence_open: bool = False  # a fence (at any depth) runs to the end of the text


def _normalized(text: str) -> tuple[str, list[int] | None]:
    """markdown-it's newline normalization, with a map back to ``text`` offsets."""
    if "\r" not in text:
        return text, None
    mapping: list[int] = []
    pieces: list[str] = []
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        mapping.append(index)
        if char == "\r":
            pieces.append("\n")
            index += 2 if index + 1 < length and text[index + 1] == "\n" else 1
        else:
            pieces.append(char)
            index += 1
    mapping.append(length)
    return "".join(pieces), mapping


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    position = find("\n")
    while position != -1:
        starts.append(position + 1)
        position = find("\n", position + 1)
    return starts


def _content_to_source(
    text: str, line_starts: list[int], token: Token, offset: int, cell: bool
) -> int:
    """Where content offset ``offset`` of ``token`` lies in ``text``, erring early."""
    content = token.content
    line_in_block = content.count("\n", 0, offset)
    line = token.map[0] + line_in_block if token.map else 0
    line_start = line_starts[min(line, len(line_starts) - 1)]
    line_end = line_starts[line + 1] - 1 if line + 1 < len(line_starts) else len(text)
    content_line_start = content.rfind("\n", 0, offset) + 1
    content_line_end = content.find("\n", offset)
    content_line = content[
        content_line_start : content_line_end if content_line_end != -1 else None
    ]
    source_line = text[line_start:line_end]
    if not cell:
        stripped = source_line.rstrip()
        for candidate in (source_line, stripped):
            if candidate.endswith(content_line):
                return line_start + len(candidate) - len(content_line) + offset - content_line_start
    found = source_line.find(content_line)
    if found == -1:
        return line_start  # unsure: the start of the line is always early enough
    return line_start + found + offset - content_line_start


def _analyze(text: str, *, hazards: bool = False) -> _Analysis:
    normalized, mapping = _normalized(text)
    collector = _Collector(hazards=hazards)
    tokens = parse_markdown(normalized, {ENV_KEY: collector})
    line_starts = _line_starts(normalized)
    found_any = any(found for _, found, _ in collector.blocks)
    raw_starts = [m.start() for m in _MARKER.finditer(normalized)] if found_any else []

    markers: list[Marker] = []
    hazard = len(normalized)
    line_cursor: dict[int, int] = {}  # table rows: raw matches already given to cells
    index_of = {id(token): i for i, token in enumerate(tokens)}
    # Blocks that reach the last line may still grow; so may one that a table whose
    # delimiter row is the last line interrupted: more of that row can unmake the table
    # ("a`a [1]\n| x |\n:-" then "`" is one paragraph, its [1] code).
    open_from = len(line_starts) - 1
    if hazards and len(line_starts) >= 2:
        header = len(line_starts) - 2
        if any(t.type == "table_open" and t.map and t.map[0] == header for t in tokens):
            open_from = header
    for token, found, token_hazards in collector.blocks:
        position = index_of[id(token)]
        cell = position > 0 and tokens[position - 1].type in ("th_open", "td_open")
        if found:
            markers.extend(
                _place(normalized, line_starts, raw_starts, token, found, cell, line_cursor)
            )
        elif cell and token.map is not None:
            # A cell without markers still takes its marker-shaped strings from its row.
            row = token.map[0]
            line_cursor[row] = line_cursor.get(row, 0) + len(_MARKER.findall(token.content))
        if token_hazards and _still_open(token, cell, open_from):
            # At-end hazards count while the block's text may run to the very end of the
            # text (container prefixes make an exact comparison unreliable: err on holding).
            at_text_end = normalized[-1:] not in ("", " ", "\t", "\n")
            offsets = [
                offset if offset >= 0 else -offset - 1  # an at-end hazard
                for offset in token_hazards
                if offset >= 0 or at_text_end
            ]
            if offsets:
                # Only the first counts, and content offsets map to source positions in
                # order: placing each of thousands of "[" read the block once per "[".
                source = _content_to_source(normalized, line_starts, token, min(offsets), cell)
                hazard = min(hazard, source)
    markers.sort(key=lambda marker: marker.start)

    blocks = [
        (token.map[0], token.map[1])
        for token in tokens
        if token.level == 0 and token.nesting >= 0 and token.map is not None
    ]
    last_line = len(line_starts) - 1
    fence_open = any(
        token.type == "fence" and token.map is not None and token.map[1] >= last_line
        for token in tokens
    )
    if mapping is not None:
        markers = [Marker(mapping[m.start], mapping[m.end], m.numbers) for m in markers]
        hazard = mapping[hazard]
        line_starts = [mapping[start] for start in line_starts]
    return _Analysis(text, markers, hazard, line_starts, blocks, fence_open)


def _still_open(token: Token, cell: bool, open_from: int) -> bool:
    """Whether more text could still extend ``token``'s block (it reaches ``open_from``,
    the first line whose reading is undecided)."""
    if token.map is None:
        return True
    first, end = token.map
    return first >= open_from if cell else end >= open_from


def _place(
    text: str,
    line_starts: list[int],
    raw_starts: list[int],
    token: Token,
    found: list[tuple[int, int, tuple[int, ...]]],
    cell: bool,
    line_cursor: dict[int, int],
) -> list[Marker]:
    """Source spans of the markers found in ``token``'s content.

    A block's content is its source lines less container prefixes (``>``, list markers,
    indentation) and table pipes, none of which can be part of a marker, so the k-th
    marker-shaped string of the content is the k-th of the block's source lines.
    """
    if token.map is None:
        return []
    content_starts = {m.start(): i for i, m in enumerate(_MARKER.finditer(token.content))}
    first_line, end_line = token.map
    region_start = line_starts[first_line]
    region_end = line_starts[end_line] if end_line < len(line_starts) else len(text) + 1
    low = bisect.bisect_left(raw_starts, region_start)
    high = bisect.bisect_left(raw_starts, region_end)
    if cell:
        low += line_cursor.get(first_line, 0)
        line_cursor[first_line] = line_cursor.get(first_line, 0) + len(content_starts)
        high = min(high, low + len(content_starts))
    in_region = raw_starts[low:high]
    if len(in_region) != len(content_starts):
        return []  # not expected to happen; no markers is the safe reading
    placed = []
    for start, end, numbers in found:
        ordinal = content_starts.get(start)
        if ordinal is None:
            continue
        source_start = in_region[ordinal]
        source_end = source_start + end - start
        if text[source_start:source_end] == token.content[start:end]:
            placed.append(Marker(source_start, source_end, numbers))
    return placed


# --- A fast path for plain answers ------------------------------------------------------
#
# Most answers are paragraphs of prose with markers, code spans, simple links and
# top-level fences. For those, one regular expression finds exactly what the parser would
# (the oracle test holds it to that); anything else, anywhere, and the parser decides.
# Every branch opens with a literal character, and none can backtrack over more than its
# own line or block.
# - A fence opener holding ``|`` may be a table's header row, so it goes to the parser.
# - Indented code is off (``markdown_parser``), so a closing fence may be indented by any
#   spaces and tabs, as the parser reads it (found by the oracle test).
# - Any line starting a block (list, quote, heading, setext or table delimiter row, hr)
#   goes to the parser; so without one there is no table and ``|`` is plain text.
# - ``<`` before a run that could be an autolink goes to the parser only if the run holds
#   a backtick, bracket (full-width too: "<【1】-->" is no autolink, and its marker is
#   text) or backslash; otherwise its reading is the same either way.
# - A backslash escape is consumed with the character it escapes.
# - A simple link's text holds no ``<``: the parser measures a label skipping autolinks,
#   so "[<http://x](u)[1]y>" is no link but an autolink holding "[1]" (found by the
#   streaming property).
# - No branch reads past a carriage return: the parser reads a lone one as a line break,
#   which may close a fence or start a block inside a code span or link text (found by
#   the oracle test), so the scanner meets it and gives up.
# Where a line starts a block that ends or changes a paragraph (a list item, quote,
# heading, thematic break, setext underline, table delimiter row, tilde fence). Anything
# near one counts: erring this way only sends more text to the parser.
_BLOCK_START = r"""[ ]*(?:
      >
    | [-+*](?=[ \t\n]|\Z)
    | -(?=[-|: \t]*(?:\n|\Z))
    | \*(?=[ \t]*\*[ \t]*\*)
    | [|:](?=[-|: \t]*(?:\n|\Z))
    | =(?=[= \t]*(?:\n|\Z))
    | _(?=[_ \t]*(?:\n|\Z))
    | \#{1,6}(?=[ \t\n]|\Z)
    | ~~~
    | \d{1,9}[.)](?=[ \t\n]|\Z)
    )"""
_FAST = re.compile(
    r"""
    # Characters no branch can start with, skipped in one step (possessive: no retries).
    [^\n`\r\t\uff3b\u3010<\\\[\]]*+
    (?:
      (?P<reset>\n[ \t]*(?=\n[A-Za-z]))
    | \n(?P<fence>[ ]{0,3}(?P<mark>`{3,}(?=[^`\n]*(?:\n|\Z))|~{3,})[^\n\r|]*(?=\n|\Z)
        (?:\n[^\r]*?)??(?:\n[ \t]*(?P=mark)(?:(?<=`)`*|(?<=~)~*)[ \t]*(?=\n|\Z)|\Z))
    | \n(?P<block>BLOCK)
    | (?P<other>``|[\r\t\uff3b\u3010])
    | <[^<>\x00-\x20`\[\]\\\uff3b\u3010]*>
    | <(?![^<>\x00-\x20]*>)
    | (?P<angle><)
    | \\[!-/:-@\[-`{-~]?
    | `[^`\n\r]*(?:\n(?![ \t]*\n)(?!BLOCK|[ ]*`)[^`\n\r]*)*`(?!`)
    | !?\[[^\[\]`\n\r\\<]*\]\([^\s()<>`\[\]\\]*\)
    | \[(?P<marker>BODY)\](?P<paren>\()?
    | (?P<bracket>[`\[\]])
    | \n
    | \Z
    )
    """.replace("BODY", _BODY).replace("BLOCK", _BLOCK_START),
    re.VERBOSE,
)


_FALLBACK = frozenset(("block", "other", "angle", "bracket", "paren"))
_RESET = re.compile(r"\n[ \t]*(?=\n[A-Za-z])")


def _fast_markers(text: str) -> list[Marker] | None:
    """The markers of ``text`` if it is a plain answer (see above), else None."""
    markers = []
    for match in _FAST.finditer("\n" + text):
        kind = match.lastgroup
        if kind in _FALLBACK:
            return None
        if match.start("marker") != -1:
            markers.append(_fast_marker(match))
    return markers


def _fast_marker(match: re.Match[str]) -> Marker:
    # The brackets lie either side of the group; offsets shift by one for the "\n" pad.
    start, end = match.start("marker") - 1, match.end("marker") + 1
    return Marker(start - 1, end - 1, _numbers(match.string[start:end]))


def _segmented_markers(text: str) -> list[Marker]:
    """The markers of ``text``: the fast path wherever it can read, the parser elsewhere.

    A line that starts with a letter after a blank line starts a top-level block with
    nothing open (no container continues past it, and reference definitions are off),
    unless a fence is still open. So the text splits there into parts read on their own:
    a part the fast path gives up on goes to the parser from the last such line before
    the trouble to the first one after it, or to the end if a fence is open there.
    """
    padded = "\n" + text  # padded[i] is text[i - 1]; a part starting at i is padded[i:]
    markers: list[Marker] = []
    position = 0
    while position < len(padded):
        part_start = position
        part_markers: list[Marker] = []
        fallback_at = -1
        for match in _FAST.finditer(padded, position):
            kind = match.lastgroup
            if kind == "reset":
                markers.extend(part_markers)
                part_markers = []
                part_start = match.end()
            elif kind in _FALLBACK:
                fallback_at = match.end()
                break
            elif match.start("marker") != -1:
                part_markers.append(_fast_marker(match))
        if fallback_at == -1:
            markers.extend(part_markers)
            break
        # The parser reads text[part_start:part_end] (padded[part_start] is its "\n").
        reset = _RESET.search(padded, fallback_at)
        part_end = len(text) if reset is None else reset.end()
        analysis = _analyze(text[part_start:part_end])
        if analysis.fence_open and part_end < len(text):
            part_end = len(text)  # a fence runs on: the rest in one parse, never re-parsed
            analysis = _analyze(text[part_start:])
        markers.extend(
            Marker(m.start + part_start, m.end + part_start, m.numbers) for m in analysis.markers
        )
        if part_end == len(text):
            break
        position = part_end
    return markers


# --- The rules --------------------------------------------------------------------------


def iter_markers(text: str) -> Iterator[Marker]:
    """Yield every citation marker in the prose of ``text``, in order."""
    global _LAST
    if _MARKER.search(text) is None:
        return iter(())  # nothing marker-shaped: no need to parse
    last_text, last_markers = _LAST
    if last_text is not text:
        # strip returns its input itself when it changes nothing, so finalize right after
        # it finds that same object here and is spared a second parse.
        last_markers = _segmented_markers(text)
        _LAST = (text, last_markers)
    return iter(last_markers)


_LAST: tuple[str | None, list[Marker]] = (None, [])


def format_marker(numbers: Sequence[int]) -> str:
    """The one canonical spelling of a marker: ``[1]`` or ``[1, 3]``."""
    return "[" + ", ".join(str(n) for n in numbers) + "]"


def _line_bounds(text: str, position: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return start, len(text) if end == -1 else end


def rewrite_markers(
    text: str,
    replace: Callable[[Marker], str | None],
    markers: Iterable[Marker] | None = None,
) -> str:
    """Rebuild ``text`` with each marker replaced by ``replace(marker)``.

    ``None`` keeps the marker as written. ``""`` drops it, with the spaces and tabs before
    it when what follows is a space, a line end or closing punctuation ("see [9]." becomes
    "see."), so no two characters become neighbours that could start something together.
    Dropping never changes the answer's blocks: a line left blank goes with its line
    break (a blank line would split a paragraph), and a line left with only structure (a
    bare list marker, ``>``, ``---``) keeps a zero-width space where the marker was.
    """
    marker_list = list(iter_markers(text) if markers is None else markers)
    decisions = [replace(marker) for marker in marker_list]
    if all(decision is None for decision in decisions):
        return text
    # The parser reads a lone carriage return as a line break: lines are judged as it
    # sees them (same length, same offsets), but the text is copied as written.
    written_text, text = text, _LONE_CR.sub("\n", text) if "\r" in text else text
    in_destination = _Destinations(text)
    # Markers whose spaces keep a "(...)" from being a link destination (asked in order).
    spaced = [False] * len(marker_list)
    for index, marker in enumerate(marker_list):
        decision = decisions[index]
        if (
            decision is not None
            and (decision == "" or not _HAS_SPACE.search(decision))
            and _HAS_SPACE.search(text, marker.start, marker.end)
        ):
            spaced[index] = in_destination(marker.start)
        if decision == "" and spaced[index]:
            # "[x](a[ 2 ]b)" is no link because of the space; "[x](ab)" would be one. A
            # space stays, between characters that are neither a title nor a ")".
            decisions[index] = _NO_DESTINATION
    emptied = _emptied_lines(text, marker_list, decisions)
    # Where each run of adjacent dropped markers ends: "`[8][9]`" must be judged by the
    # backticks either side of the whole run, not by the next marker's bracket.
    run_ends = [marker.end for marker in marker_list]
    for index in range(len(marker_list) - 2, -1, -1):
        if decisions[index + 1] == "" and marker_list[index + 1].start == marker_list[index].end:
            run_ends[index] = run_ends[index + 1]
    pieces: list[str] = []
    written = ""  # the last character of the output so far (kept, not searched for)
    position = 0
    lines = _Lines(text)
    for index, (marker, replacement) in enumerate(zip(marker_list, decisions, strict=True)):
        if replacement is None or marker.start < position:
            continue
        between = text[position : marker.start]
        if replacement == "":
            line_start = lines.start_of(marker.start)
            fate = emptied.pop(line_start, None)
            if isinstance(fate, int):  # the whole line goes, with its line break
                pieces.append(written_text[position:line_start])
                written = pieces[-1][-1:] or written
                position = fate
                continue
            if fate == ZERO_WIDTH_SPACE:
                replacement = fate
            else:
                between, replacement = _drop(
                    text,
                    marker,
                    between,
                    structure_end=lines.structure_end(line_start),
                    line_start=line_start,
                    written=written,
                    run_end=run_ends[index],
                )
        elif spaced[index] and not _HAS_SPACE.search(replacement):
            # "[x]([ 2 ])" is no link because of the space; "[x]([1])" would be one.
            replacement = replacement[0] + " " + replacement[1:-1] + " " + replacement[-1]
        pieces.append(written_text[position : position + len(between)])
        pieces.append(replacement)
        written = replacement[-1:] or pieces[-2][-1:] or written
        position = marker.end
    pieces.append(written_text[position:])
    return "".join(pieces)


_HAS_SPACE = re.compile(r"[ \u3000]")
_NO_DESTINATION = ZERO_WIDTH_SPACE + " " + ZERO_WIDTH_SPACE
_LONE_CR = re.compile(r"\r(?!\n)")


class _Destinations:
    """Whether a position may lie in a link destination: a run without whitespace leads
    back to ``](``, or, from its start, blanks with at most one line break do.

    Positions are asked in increasing order, and the text is read once in all: a CJK
    answer's markers ("[\u30009\u3000]") hold no whitespace a destination ends at, so
    looking back from each marker read its whole line again (quadratic)."""

    # Up to and including the last character a destination ends at (the parser's rule:
    # a space or a control character; "\xa0" or "\u2028" may sit inside one).
    _THROUGH_LAST_BREAK = re.compile(r"(?:[^\x00-\x20\x7f]*+[\x00-\x20\x7f])*+")
    _PARENTHESES = re.compile(r"[()]")

    def __init__(self, text: str) -> None:
        self.text = text
        self.read = 0  # the text before this is read
        self.run_start = 0  # where the run of non-whitespace being read began
        # The run's parentheses not yet closed, each true if it follows "]" (a destination
        # opens there); a destination's parentheses balance, so "(x)" before is closed.
        self.open: list[bool] = []
        self.open_links = 0
        self.blanks: tuple[int, bool] = (-1, False)  # the run start last looked behind

    def __call__(self, start: int) -> bool:
        text = self.text
        if start < self.read:
            raise ValueError("positions must be asked in increasing order")
        through = self._THROUGH_LAST_BREAK.match(text, self.read, start)
        run_start = through.end() if through else self.read  # (it always matches)
        if run_start > self.read or self.read == 0:
            self.run_start, self.open, self.open_links = run_start, [], 0
        for paren in self._PARENTHESES.finditer(text, max(self.read, self.run_start), start):
            at = paren.start()
            if paren[0] == "(":
                link = at > 0 and text[at - 1] == "]"
                self.open.append(link)
                self.open_links += link
            elif self.open:
                self.open_links -= self.open.pop()
        self.read = start
        if self.open_links:
            return True
        # The run (or the marker, right after whitespace) may start the destination:
        # "[x](\na[ 1 ])" is no link, but "[x](\na[1])" would be one.
        if self.blanks[0] != self.run_start:
            position, newlines = self.run_start, 0
            while position > 0 and text[position - 1] in " \t\r\n":  # "\r\n" counts once
                newlines += text[position - 1] == "\n"
                position -= 1
            self.blanks = (
                self.run_start,
                newlines <= 1 and text[position - 2 : position] == "](",
            )
        return self.blanks[1]


class _Lines:
    """Line starts (and each line's leading structure) for positions asked in increasing
    order, each found once: searching back from every marker read a long line once per
    marker (quadratic)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.read = 0
        self.current = 0
        self.structure = (-1, -1)  # a line start, and where its leading structure ends

    def start_of(self, position: int) -> int:
        if position > self.read:
            found = self.text.rfind("\n", self.read, position)
            if found != -1:
                self.current = found + 1
            self.read = position
        return self.current

    def structure_end(self, line_start: int) -> int:
        """Where ``_STRUCTURAL_ONLY`` stops reading the line from ``line_start``."""
        if self.structure[0] != line_start:
            self.structure = (line_start, _STRUCTURAL_ONLY.match(self.text, line_start).end())  # type: ignore[union-attr]
        return self.structure[1]


def _drop(
    text: str,
    marker: Marker,
    between: str,
    *,
    structure_end: int,
    line_start: int,
    written: str,
    run_end: int,
) -> tuple[str, str]:
    """What replaces a dropped marker, and the text before it, on a line that keeps text.

    ``run_end`` is where the run of dropped markers this one starts or continues ends;
    ``written`` the last character of the output before ``between``; ``structure_end``
    where the line's leading structure (``_STRUCTURAL_ONLY``) ends. Everything is read
    from positions, never a copy of the line: a line may hold thousands of markers.
    """
    following = text[run_end : run_end + 1]
    if structure_end >= marker.start and _TEXT_FOLLOWS.match(text, run_end):
        # First text of its line: what follows could become a list item, a heading or a
        # fence ("[9]- x", "[9]```", and "[9] ```" too: up to three spaces may lead a
        # fence) if nothing took the marker's place.
        return between, ZERO_WIDTH_SPACE
    before_end = marker.start
    kept_end = before_end
    while kept_end > line_start and text[kept_end - 1] in " \t":
        kept_end -= 1
    if (
        (following == "" or following in _SPACES_GO_BEFORE or _closing_run(text, run_end))
        and structure_end < kept_end
        # "a\\ [9]" + a line end would become a hard line break, "a\\ [9]." an escape.
        and text[kept_end - 1] != "\\"
    ):
        between = between[: len(between) - (before_end - kept_end)]
        before_end = kept_end
    left = between[-1:] or written
    joins = left in _JOINS_LEFT or following in _JOINS_RIGHT or (left, following) in _JOINS
    # "&#[9]91;" would become the entity "&#91;", shown as "[".
    joins = joins or (following in _ENTITY_REST and _entity_before(text, line_start, before_end))
    if following == ")" and _text_before(text, line_start, before_end):
        # "[x](a [9])" is no link, but "[x](a )" would be one: something must stay.
        return between, ZERO_WIDTH_SPACE
    if left == "|" and following in ("", "\n", "\r"):
        # A row's last pipe is dropped when nothing follows it: "a|[9]" has two cells,
        # "a|" one, and one more cell can make a table's header of the row.
        return between, ZERO_WIDTH_SPACE
    if left.strip() and following.strip() and joins:
        # "``[9]`" would make one run of three backticks, "<[9]http:x>" an autolink.
        return between, ZERO_WIDTH_SPACE
    return between, ""


# Text (not only spaces) after a position, before the line ends.
_TEXT_FOLLOWS = re.compile(r"[ \t\r]*+[^ \t\r\n]")
_ASCII_ALPHANUMERIC = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _text_before(text: str, line_start: int, end: int) -> bool:
    """Whether ``text[line_start:end]`` holds anything but whitespace (read back from
    ``end`` over the whitespace only)."""
    position = end
    while position > line_start and text[position - 1].isspace():
        position -= 1
    return position > line_start


def _entity_before(text: str, line_start: int, end: int) -> bool:
    """Whether ``text[line_start:end]`` ends in the start of an entity (``&``, ``&#``,
    ``&#x1``, ``&am``), read back from ``end`` only over the alphanumerics before it."""
    position = end
    while position > line_start and text[position - 1] in _ASCII_ALPHANUMERIC:
        position -= 1
    if position > line_start and text[position - 1] == "#":
        position -= 1
    return position > line_start and text[position - 1] == "&"


def _closing_run(text: str, position: int) -> bool:
    """Whether ``text`` at ``position`` starts a delimiter run that may close emphasis as
    it stands after a marker: followed by a space, punctuation or the line end (the
    parser's own test). After a space it could close nothing: "*see [9]*" must become
    "*see*", not "*see *", which shows its asterisks."""
    run = _DELIMITER_RUN.match(text, position)
    if run is None:
        return False
    after = text[run.end() : run.end() + 1]
    return not after or isWhiteSpace(ord(after)) or isMdAsciiPunct(ord(after)) or isPunctChar(after)


def _emptied_lines(
    text: str, markers: list[Marker], decisions: list[str | None]
) -> dict[int, int | str]:
    """Lines whose remains, once their dropped markers go, are blank (mapped to where the
    removal ends) or only structure (mapped to the zero-width space)."""
    by_line: dict[int, list[Marker]] = {}
    lines = _Lines(text)
    for marker, decision in zip(markers, decisions, strict=True):
        line_start = lines.start_of(marker.start)
        if decision == "":
            by_line.setdefault(line_start, []).append(marker)
    emptied: dict[int, int | str] = {}
    starts: set[int] | None = None  # paragraphs' first lines, parsed only when needed
    line_number, counted = 0, 0
    # Lines removed one after another move the next line up as far as the first of them:
    # where the run of removed lines began (line number), and where it ends (offset).
    run_first, run_end = 0, -1
    for line_start, dropped in by_line.items():
        # Lines come in order: count line breaks from the last line counted.
        line_number += text.count("\n", counted, line_start)
        counted = line_start
        if line_start != run_end:
            run_first = line_number
        _, line_end = _line_bounds(text, line_start)
        remains, position = [], line_start
        for marker in dropped:
            remains.append(text[position : marker.start])
            position = marker.end
        remains.append(text[position:line_end])
        left = "".join(remains)
        if left.strip(" \t\r") == "":
            following = _next_line(text, line_end)
            if _UNDERLINE.fullmatch(following):
                # A setext underline or a table's delimiter row reads with the line above
                # it: "[9]\n===" is a heading and "| a |\n[9]\n|-|" no table, but without
                # the line "===" is text and "| a |" a table's header. Keep the line.
                emptied[line_start] = ZERO_WIDTH_SPACE
                continue
            # An indented next line may join the block above ("+ \n[9]\n  a" would make
            # "a" the empty item's text), and after an indented line, one may have been
            # lazy ("- \n  [9]\na" would leave the item): only unindented lines move up.
            if following.strip(" \t\r") and (
                following.startswith((" ", "\t"))
                or left.startswith((" ", "\t"))
                or not _begins_a_paragraph(following)
            ):
                if starts is None:
                    starts = _paragraph_first_lines(text)
                if run_first in starts:
                    # Removing the first line of a paragraph moves the next one up to where
                    # a block begins, where "2) x" starts a list and four spaces a code
                    # block ("[9]\n2) `\n2) [1]`" would then cite [1]): keep the line. So
                    # does removing every line from the first ("[9]\n[9]\n+ x").
                    emptied[line_start] = ZERO_WIDTH_SPACE
                    continue
            emptied[line_start] = run_end = min(line_end + 1, len(text))
        elif _STRUCTURAL_ONLY.fullmatch(left.rstrip("\r")):
            emptied[line_start] = ZERO_WIDTH_SPACE
    return emptied


def _paragraph_first_lines(text: str) -> set[int]:
    """The line numbers that begin a paragraph (or a heading), at any depth. ``text`` has
    no lone carriage return (``rewrite_markers`` made each a line feed), so each "\r\n" is
    one line break to the parser and to ``text.count("\n")`` alike. (Counting every line
    when the text held a "\r" made a "\r" anywhere later change how an earlier line was
    dropped, so a stream shown before it differed from the stored answer.)"""
    return {
        token.map[0]
        for token in parse_markdown(text, {})
        # A setext heading was a paragraph until its underline came: "[9]\n1.\n---" keeps
        # its first line, or "1." would start a list and "---" be a rule.
        if token.type in ("paragraph_open", "heading_open") and token.map is not None
    }


def _next_line(text: str, line_end: int) -> str:
    """The line after the one ending at ``line_end`` ("" when there is none)."""
    if line_end >= len(text):
        return ""
    following_end = text.find("\n", line_end + 1)
    return text[line_end + 1 : len(text) if following_end == -1 else following_end]


def _begins_a_paragraph(line: str) -> bool:
    """Whether ``line``, where a block begins, begins a paragraph (not a list item, code,
    a heading, a fence, a rule, an HTML block or a table)."""
    tokens = parse_markdown(line, {})
    return bool(tokens) and tokens[0].type == "paragraph_open"


def _strip_replacement(count: int) -> Callable[[Marker], str | None]:
    def replace(marker: Marker) -> str | None:
        kept = [n for n in marker.numbers if 1 <= n <= count]
        if len(kept) == len(marker.numbers):
            return None
        return format_marker(kept) if kept else ""

    return replace


def strip_out_of_range_markers(text: str, count: int) -> str:
    """Remove every cited number outside ``1..count``.

    A group keeps its valid numbers (``[1, 9]`` becomes ``[1]``); a marker with none
    left is removed (see ``rewrite_markers``). Valid markers are left as written.
    """
    return rewrite_markers(text, _strip_replacement(count))


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
    providers that ignore the contract). Every marker is rewritten in the canonical
    spelling, so no form is left holding a number from before the renumbering.
    """
    markers = list(iter_markers(text))  # one parse serves both passes below
    order = [n for n in cited_numbers(text, markers) if 1 <= n <= len(sources)]
    if not order:
        return FinalizedCitations(text, list(sources), {}, fallback=True)
    number_map = {old: new for new, old in enumerate(order, start=1)}

    # Markers are rewritten one cluster at a time ("[2][2]" or "[1] [1, 2]" are clusters),
    # so a number repeated within a cluster is said once.
    last_end = -1
    cluster: set[int] = set()
    expected: list[tuple[int, ...]] = []

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
        if not numbers:
            return ""
        expected.append(tuple(numbers))
        spelled = format_marker(numbers)
        if text[marker.start] != "[" and text[marker.end : marker.end + 1] == "(":
            # "【1】(x)" spelled "[1](x)" would become a link: keep its own brackets.
            spelled = text[marker.start] + spelled[1:-1] + text[marker.end - 1]
        return spelled

    final_text = rewrite_markers(text, replace, markers)
    final_sources = [sources[old - 1] for old in order]
    return FinalizedCitations(final_text, final_sources, number_map, fallback=False)


# --- Streaming -------------------------------------------------------------------------
#
# While an answer streams, out-of-range markers must not reach the client either, and
# what the client sees, joined, must equal ``strip_out_of_range_markers(raw)``. A prefix of
# the raw text is shown only once nothing that may still arrive can change how it reads
# (ADR 0005): the parse reports every place where more text could change the reading of
# what is before it (an open backtick run, a "[" that may become a link, a link whose
# label holds a backtick or "<", "<", a trailing "\\", a marker at the very end), and lines
# hold while their start, or a table row, is undecided.
#
# Cost per delta does not grow with the answer: the filter commits at top-level block
# boundaries (nothing after a closed block can change it, and markdown-it parses what
# follows the same way on its own), and within a block it parses again only once the
# unsettled text has grown by a fixed share, so each character is parsed a bounded number
# of times. Text that cannot change anything (no bracket, backtick, "<", "\\", "|" or line
# break) is shown at once without a parse.

# Parsing is paid for from a budget that each character fed adds to, so however the
# deltas fall, each character is parsed at most about this many times...
_PARSE_BUDGET_PER_CHAR = 8
# ... and each parse also costs this much, so tiny deltas cannot parse a long tail each.
_PARSE_OVERHEAD = 200
# A short answer is parsed on every delta that needs it.
_INITIAL_PARSE_BUDGET = 4000
# A parse that settled nothing new, with more than _STALL_MIN characters held, waits
# until the held text has grown this many times over (or a line ends): an unresolvable
# "[x](" or backtick is not parsed again and again while it cannot resolve.
_STALL_GROWTH = 8
_STALL_MIN = 64
_PLAIN_DELTA = re.compile(r"[^\n\r`\[\]<\\|\uff3b\u3010]*")
# A line start that no later character can turn into a fence, a table row or another
# block whose text reads differently: optional container prefixes, then a letter.
# Possessive: a line of spaces without a letter was tried at every split (quadratic).
_SETTLED_LINE_START = re.compile(r"[ \t]*+(?:(?:>|[-+*]|\d{1,9}[.)])[ \t]++)*+>?[ \t]*+[^\W\d_]")
_DELIMITER_ROW_PREFIX = re.compile(r"[ \t]*[|:\-][|:\- \t]*")


def _settled_length(analysis: _Analysis, count: int) -> int:
    """Length of the prefix of ``analysis.text`` whose stripped form can no longer change."""
    text = analysis.text
    cut = min(analysis.hazard, len(text))
    if text.endswith("\r"):
        cut = min(cut, len(text) - 1)  # "\r\n" still to come would be one line break

    starts = analysis.line_starts
    last_start = starts[-1]
    last_line = text[last_start:]
    if not _SETTLED_LINE_START.match(last_line):
        cut = min(cut, last_start)
    # A line with a pipe becomes a table header if the next line is a delimiter row.
    if "|" in last_line:
        cut = min(cut, last_start)
    if len(starts) >= 2 and (not last_line or _DELIMITER_ROW_PREFIX.fullmatch(last_line)):
        previous_start = starts[-2]
        if "|" in text[previous_start:last_start]:
            cut = min(cut, previous_start)

    return _settle_around_markers(text, cut, analysis.markers, _strip_replacement(count))


def _settle_around_markers(
    text: str, cut: int, markers: list[Marker], replace: Callable[[Marker], str | None]
) -> int:
    """Move ``cut`` back until what ``rewrite_markers`` does to the prefix is final.

    Only three markers can hold a cut back: the last one before it, and the first dropped
    one of the cut's line and of the line before. So each step looks at those three, and
    however far the cut moves ("[9]\n" repeated moves it line by line) the cost stays
    linear; it moves as far as looking at every marker from the first would.
    """
    starts = [marker.start for marker in markers]
    dropped = [marker.start for marker in markers if replace(marker) == ""]
    is_dropped = set(dropped)
    # Per line start, read once: where the line's structure and markers end, and whether
    # it is blank once its markers go.
    extents: dict[int, int] = {}
    blank: dict[int, bool] = {}
    while True:
        # Spaces and tabs go with a marker dropped right after them.
        while cut > 0 and text[cut - 1] in " \t":
            cut -= 1
        held: list[int] = []
        last = bisect.bisect_left(starts, cut) - 1
        if last >= 0:
            marker = markers[last]
            if marker.end > cut:  # never cut through a marker
                held.append(marker.start)
            elif marker.start in is_dropped and (
                marker.end == cut or _DELIMITER_RUN.fullmatch(text, marker.end, cut)
            ):
                # The next character decides whether the spaces before it go (after a
                # delimiter run, the character after the run: ``_closing_run``).
                held.append(marker.start)
        line_start = text.rfind("\n", 0, cut) + 1
        first = bisect.bisect_left(dropped, line_start)
        if first < len(dropped) and dropped[first] < cut:
            # On an unfinished line, whether dropping it leaves the line blank or bare
            # structure depends on the rest of the line.
            if line_start not in extents:
                structure = _STRUCTURE_AND_MARKERS.match(text, line_start)
                extents[line_start] = structure.end() if structure else line_start
            if extents[line_start] >= cut:
                held.append(dropped[first])
        if line_start > 0:
            # A line dropping leaves blank goes, or keeps a zero-width space, as the next
            # line reads (``_emptied_lines``): wait until that line is complete.
            previous_start = text.rfind("\n", 0, line_start - 1) + 1
            first = bisect.bisect_left(dropped, previous_start)
            if first < len(dropped) and dropped[first] < line_start:
                if previous_start not in blank:
                    remains = _MARKER.sub("", text[previous_start : line_start - 1])
                    blank[previous_start] = remains.strip(" \t\r") == ""
                if blank[previous_start]:
                    held.append(dropped[first])
        if not held:
            return cut
        cut = min(held)


def _reset_point(analysis: _Analysis, settled: int) -> int:
    """The start of the last top-level block that nothing before it can reach, or 0."""
    starts = analysis.line_starts
    text = analysis.text
    best = 0
    for (_, previous_end), (start_line, _) in itertools.pairwise(analysis.blocks):
        if start_line <= previous_end or start_line + 1 >= len(starts):
            continue  # no blank line between, or the block's first line is unfinished
        offset = starts[start_line]
        if offset > settled:
            break
        if text[starts[previous_end] : offset].strip() == "":
            best = offset
    return best


class MarkerStreamFilter:
    """Feed raw deltas, get back text that is safe to show: markers in ``1..count`` only.

    Joined, the output equals ``strip_out_of_range_markers(raw, count)``. ``new_citations``
    lists the numbers cited for the first time by the text emitted so far.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self._raw: list[str] = []  # everything fed, for ``raw``
        self._tail: list[str] = []  # raw text after the last committed block boundary
        self._tail_length = 0
        self._tail_emitted = 0  # length of the stripped tail already emitted
        self._budget = _INITIAL_PARSE_BUDGET
        self._stalled_until = 0  # no parse before the tail is this long (see _STALL_GROWTH)
        self._open = False  # the last parse settled everything but trailing spaces
        self._held_spaces: list[str] = []
        self._cited: dict[int, None] = {}
        self._pending_citations: list[int] = []

    @property
    def raw(self) -> str:
        joined = "".join(self._raw)
        self._raw = [joined]
        return joined

    def feed(self, delta: str) -> str:
        if not delta:
            return ""
        self._raw.append(delta)
        self._tail.append(delta)
        self._tail_length += len(delta)
        self._budget += _PARSE_BUDGET_PER_CHAR * len(delta)
        if self._open and _PLAIN_DELTA.fullmatch(delta):
            # Plain text after settled text on a settled line: nothing in it can change.
            body = delta.rstrip(" \t")
            if not body:
                # Only spaces: held with the others (joined only once text follows, so a
                # long run of tiny deltas is not copied again with each one).
                self._held_spaces.append(delta)
                return ""
            shown = "".join(self._held_spaces) + body
            self._held_spaces = [delta[len(body) :]]
            self._tail_emitted += len(shown)
            return shown
        self._open = False
        cost = self._tail_length + _PARSE_OVERHEAD
        if self._budget < cost:
            return ""  # parsed again once enough new text has paid for it
        if self._tail_length < self._stalled_until and "\n" not in delta:
            return ""
        self._budget -= cost
        return self._evaluate(final=False)

    def close(self) -> str:
        return self._evaluate(final=True)

    def _evaluate(self, *, final: bool) -> str:
        tail = "".join(self._tail)
        self._tail = [tail]
        analysis = _analyze(tail, hazards=not final)
        settled = len(tail) if final else _settled_length(analysis, self.count)
        markers = [m for m in analysis.markers if m.end <= settled]
        stripped = rewrite_markers(tail[:settled], _strip_replacement(self.count), markers)
        out = stripped[self._tail_emitted :]
        self._tail_emitted = max(self._tail_emitted, len(stripped))
        held = len(tail) - settled
        stalled = not out and not final and held > _STALL_MIN
        self._stalled_until = len(tail) + held * (_STALL_GROWTH - 1) if stalled else 0
        for marker in markers:
            for number in marker.numbers:
                if 1 <= number <= self.count and number not in self._cited:
                    self._cited[number] = None
                    self._pending_citations.append(number)
        self._held_spaces = []
        rest = tail[settled:]
        last_line = tail[tail.rfind("\n") + 1 :]
        self._open = (
            not final
            and rest.strip(" \t") == ""
            and "\n" not in rest
            and "\r" not in rest
            and _SETTLED_LINE_START.match(last_line) is not None
        )
        if self._open:
            self._held_spaces = [rest]
        if not final:
            self._commit(tail, analysis, settled)
        return out

    def _commit(self, tail: str, analysis: _Analysis, settled: int) -> None:
        boundary = _reset_point(analysis, settled)
        if boundary <= 0:
            return
        done = [m for m in analysis.markers if m.end <= boundary]
        done_stripped = rewrite_markers(tail[:boundary], _strip_replacement(self.count), done)
        rest = tail[boundary:]
        self._tail = [rest]
        self._tail_length = len(rest)
        self._tail_emitted -= len(done_stripped)

    def take_new_citations(self) -> list[int]:
        """Numbers first cited by the text emitted since the last call (the filter knows
        which markers it has shown, so nothing is scanned again)."""
        new, self._pending_citations = self._pending_citations, []
        return new
