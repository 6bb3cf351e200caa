"""The citation rules of ADR 0011 (``answers.citations``), tested as a pure contract.

Example tests pin the exact strings. Property tests build Markdown-ish answers from a plan
of pieces (prose, markers, code, links, ...), so they know what every piece is, and check:

* a small reference model of strip + finalize, written over the plan rather than over the
  text, gives exactly the same text, sources and number map (so the scanner finds exactly
  the planned markers and nothing else);
* the ADR's properties, stated only with the module's own functions;
* that code is byte-identical, both as planned and as markdown-it (the renderer's parser)
  sees it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from answers.citations import (
    FinalizedCitations,
    Marker,
    cited_numbers,
    finalize_citations,
    format_marker,
    iter_markers,
    rewrite_markers,
    strip_out_of_range_markers,
)


def names(count: int) -> list[str]:
    return [f"s{i}" for i in range(1, count + 1)]


def run(text: str, count: int) -> tuple[str, FinalizedCitations[str]]:
    stripped = strip_out_of_range_markers(text, count)
    return stripped, finalize_citations(stripped, names(count))


# --------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------

# Rule: (text, source count, expected stripped text, expected final text, expected sources);
# stripped ``None``: the text unchanged; expected sources ``None`` means the fallback: every
# source kept, final text == stripped.
EXAMPLES: dict[str, list[tuple[str, int, str | None, str, list[str] | None]]] = {
    "Renumbering in first-citation order (the ADR's own example).": [
        ("[1][3]", 3, "[1][3]", "[1][2]", ["s1", "s3"]),
        ("A [1]. B [3].", 3, "A [1]. B [3].", "A [1]. B [2].", ["s1", "s3"]),
        ("[2] first, then [1].", 2, "[2] first, then [1].", "[1] first, then [2].", ["s2", "s1"]),
        ("[3] [1] [3] [2]", 3, "[3] [1] [3] [2]", "[1] [2] [3]", ["s3", "s1", "s2"]),
    ],
    "Uncited sources are dropped.": [
        ("Only [2] here.", 4, "Only [2] here.", "Only [1] here.", ["s2"]),
    ],
    "Citing nothing: the fallback keeps text and sources.": [
        ("No citations here.", 3, "No citations here.", "No citations here.", None),
        ("", 2, "", "", None),
        ("Nothing.", 0, "Nothing.", "Nothing.", None),
    ],
    "Duplicates in one cluster collapse; the same number elsewhere stays.": [
        ("[2][2]", 3, "[2][2]", "[1]", ["s2"]),
        ("[2] [2]", 3, "[2] [2]", "[1]", ["s2"]),
        ("[2]\t[2].", 3, "[2]\t[2].", "[1].", ["s2"]),
        ("Fact [2][2] and [2].", 3, "Fact [2][2] and [2].", "Fact [1] and [1].", ["s2"]),
        ("[1]\n[1]", 1, "[1]\n[1]", "[1]\n[1]", ["s1"]),
        ("[3][1, 3]", 3, "[3][1, 3]", "[1][2]", ["s3", "s1"]),
        ("[1, 1]", 1, "[1, 1]", "[1]", ["s1"]),
        ("[1][9][1]", 3, "[1][1]", "[1]", ["s1"]),
        ("[1] [9] [1]", 3, "[1] [1]", "[1]", ["s1"]),
    ],
    "Groups: out-of-range numbers leave the group; canonical spelling after finalize.": [
        ("[1, 9]", 3, "[1]", "[1]", ["s1"]),
        ("[9, 2, 0]", 3, "[2]", "[1]", ["s2"]),
        ("[1,3]", 3, "[1,3]", "[1, 2]", ["s1", "s3"]),
        ("[ 2 , 1 ]", 2, "[ 2 , 1 ]", "[1, 2]", ["s2", "s1"]),
        ("[ 1 ]", 1, "[ 1 ]", "[1]", ["s1"]),
    ],
    "A dropped marker takes the spaces and tabs before it, never a newline.": [
        ("see [9].", 3, "see.", "see.", None),
        ("see [9]. And [2].", 3, "see. And [2].", "see. And [1].", ["s2"]),
        # Before "\r\n" too: two spaces kept would make a hard line break.
        ("see  [9]\r\nmore [1]", 1, "see\r\nmore [1]", "see\r\nmore [1]", ["s1"]),
    ],
    # A space that kept "(...)" from being a destination stays (found by the oracle test).
    "Respelling never turns text into a link.": [
        ("[2]([ 2 ]`[1]`)", 2, "[2]([ 2 ]`[1]`)", "[1]([ 1 ]`[1]`)", ["s2"]),
        ("[x]([1, 9])", 1, "[x]([ 1 ])", "[x]([ 1 ])", ["s1"]),
        ("[x](\n[ 2 ])", 2, "[x](\n[ 2 ])", "[x](\n[ 1 ])", ["s2"]),
        ("[x](\r\n[ 2 ])", 2, "[x](\r\n[ 2 ])", "[x](\r\n[ 1 ])", ["s2"]),
        ("[x](a [9])", 1, "[x](a \u200b)", "[x](a \u200b)", None),
    ],
    "Adjacent dropped markers are one run: judged by what follows the whole run.": [
        ("see [8][9].", 3, "see.", "see.", None),
        ("`[1]`[8][9]`", 3, "`[1]`\u200b`", "`[1]`\u200b`", None),
        ("Tabs \t[0] end", 3, "Tabs end", "Tabs end", None),
        ("[0] x [1]", 1, "\u200b x [1]", "\u200b x [1]", ["s1"]),
        ("line\n[9] next [1]", 1, "line\n\u200b next [1]", "line\n\u200b next [1]", ["s1"]),
        ("Any [1] [4] [0].", 3, "Any [1].", "Any [1].", ["s1"]),
        ("[1] [2] [1]", 2, "[1] [2] [1]", "[1] [2]", ["s1", "s2"]),
    ],
    "Code is never read or rewritten.": [
        ("`a[1]` [2]", 2, "`a[1]` [2]", "`a[1]` [1]", ["s2"]),
        ("`a[9]`", 2, "`a[9]`", "`a[9]`", None),
        ("``a`[1]`` [2]", 2, "``a`[1]`` [2]", "``a`[1]`` [1]", ["s2"]),
        ("`` `[3]` `` [2]", 3, "`` `[3]` `` [2]", "`` `[3]` `` [1]", ["s2"]),
        (
            "```\nx = a[1]\n```\n[2]",
            2,
            "```\nx = a[1]\n```\n[2]",
            "```\nx = a[1]\n```\n[1]",
            ["s2"],
        ),
        (
            "~~~python\n[9] [1]\n\n~~~\nSee [2].",
            2,
            "~~~python\n[9] [1]\n\n~~~\nSee [2].",
            "~~~python\n[9] [1]\n\n~~~\nSee [1].",
            ["s2"],
        ),
        ("````\n```\n[1]\n```\n````\n[2]", 2, None, "````\n```\n[1]\n```\n````\n[1]", ["s2"]),
        ("```\n[1] never closed", 1, None, "```\n[1] never closed", None),
        # "\r\n" and a lone "\r" end lines as "\n" does (the fast path once read on).
        ("```\r\n[9]\r\n```\r\n[1]", 1, None, "```\r\n[9]\r\n```\r\n[1]", ["s1"]),
        ("`a\r- [1]`", 1, None, "`a\r- [1]`", ["s1"]),
        ("Prose\n   ```js\n[0]\n   ```\n[1]", 1, None, "Prose\n   ```js\n[0]\n   ```\n[1]", ["s1"]),
    ],
    "A code span cannot cross a blank line, so this [1] is prose.": [
        ("`a\n\n[1]` b", 1, "`a\n\n[1]` b", "`a\n\n[1]` b", ["s1"]),
    ],
    "Unbalanced backtick runs are literal text, so the marker between them is prose.": [
        ("``[2]` x", 2, "``[2]` x", "``[1]` x", ["s2"]),
        ("a `[2]`` b [1]", 2, "a `[2]`` b [1]", "a `[1]`` b [2]", ["s2", "s1"]),
    ],
    "Links, images, footnotes, escapes, autolinks and reference definitions are not markers.": [
        ("[x](http://x) [1]", 1, None, "[x](http://x) [1]", ["s1"]),
        ("[1](http://x) and [2]", 2, None, "[1](http://x) and [1]", ["s2"]),
        ("[see [1]](http://x) [2]", 2, None, "[see [1]](http://x) [1]", ["s2"]),
        ("![1](http://x/i.png) [2]", 2, None, "![1](http://x/i.png) [1]", ["s2"]),
        ("Note[^1] and [2]", 2, None, "Note[^1] and [1]", ["s2"]),
        ("\\[1] and [2]", 2, None, "\\[1] and [1]", ["s2"]),
        ("\\[9]", 2, "\\[9]", "\\[9]", None),
        ("<http://x/[1]> [2]", 2, None, "<http://x/[1]> [1]", ["s2"]),
    ],
    'Reference definitions are off (ADR 0004): "[1]: ..." is prose, so [1] is a marker.': [
        ("[1]: http://x\n[2]", 2, None, "[1]: http://x\n[2]", ["s1", "s2"]),
    ],
    "... but a marker right after a link is a citation, as is one after an escaped '\\'.": [
        ("[x](http://u)[2]", 2, None, "[x](http://u)[1]", ["s2"]),
        ("[x](http://u)[9]", 2, "[x](http://u)", "[x](http://u)", None),
        ("\\\\[2]", 2, None, "\\\\[1]", ["s2"]),
        ("[^1][2]", 2, None, "[^1][1]", ["s2"]),
    ],
    'At most three digits make a marker: "[2025]" is a year, and is left alone.': [
        ("[12345] [1]", 3, "[12345] [1]", "[12345] [1]", ["s1"]),
        ("[12345]", 3, "[12345]", "[12345]", None),
        ("[1, 12345]", 3, "[1, 12345]", "[1, 12345]", None),
        ("[1234]", 3, "[1234]", "[1234]", None),
        ("[002]", 3, "[002]", "[1]", ["s2"]),
        ("In [2025], finding [1]", 1, None, "In [2025], finding [1]", ["s1"]),
    ],
    "Not markers at all.": [
        ("[1\n]", 1, "[1\n]", "[1\n]", None),
        ("[a] [1 2] [1,] [-1]", 1, None, "[a] [1 2] [1,] [-1]", None),
    ],
    # --- Where the renderer decides (issue 12): one example per class ---
    "A fence in a list item, indented past the item's content: code, never renumbered.": [
        (
            "1. Install:\n\n    ```python\n    x = a[2]\n\n    y = 1\n    ```\n\nSee [1].",
            2,
            None,
            "1. Install:\n\n    ```python\n    x = a[2]\n\n    y = 1\n    ```\n\nSee [1].",
            ["s1"],
        ),
    ],
    "Fences in a blockquote and right after a list marker.": [
        ("> ```\n> a[1]\n> ```\n\n[2]", 2, None, "> ```\n> a[1]\n> ```\n\n[1]", ["s2"]),
        ("- ```\n  a[1]\n  ```\n- [2]", 2, None, "- ```\n  a[1]\n  ```\n- [1]", ["s2"]),
    ],
    "An inline backtick run cannot pair across the fence that ends its paragraph.": [
        (
            "Wrap the code in ``` like this:\n```python\nx = 1\n```\nThis works [2] and [9].",
            2,
            "Wrap the code in ``` like this:\n```python\nx = 1\n```\nThis works [2] and.",
            "Wrap the code in ``` like this:\n```python\nx = 1\n```\nThis works [1] and.",
            ["s2"],
        ),
    ],
    '"[n]:" lines are prose (no reference definitions), renumbered with the rest.': [
        (
            "Intro [2].\n[1]: detail one.\n[2]: detail two.",
            2,
            None,
            "Intro [1].\n[2]: detail one.\n[1]: detail two.",
            ["s2", "s1"],
        ),
    ],
    "Links: parentheses in the destination, titles, text across lines.": [
        (
            "[wiki](https://x/Foo_(bar)[9]) [1]",
            1,
            None,
            "[wiki](https://x/Foo_(bar)[9]) [1]",
            ["s1"],
        ),
        ('[a](http://x "t [1]") [2]', 2, None, '[a](http://x "t [1]") [1]', ["s2"]),
        ("[see\n[1]](http://x) [2]", 2, None, "[see\n[1]](http://x) [1]", ["s2"]),
        ("[1]\n(http://x) [2]", 2, None, "[1]\n(http://x) [2]", ["s1", "s2"]),
    ],
    "A heading, a table cell, raw HTML (shown as text) are prose.": [
        ("# Title [2]\n\nBody [1]", 2, None, "# Title [1]\n\nBody [2]", ["s2", "s1"]),
        (
            "| a | b |\n|---|---|\n| `x [1] | y` [2] |",
            2,
            None,
            "| a | b |\n|---|---|\n| `x [1] | y` [2] |",
            ["s1", "s2"],
        ),
    ],
    "A cell past the header's columns is not shown at all, so it holds no marker.": [
        ("| a |\n|---|\n| [2] | [1] |", 2, None, "| a |\n|---|\n| [1] | [1] |", ["s2"]),
        ("<div>\n[2]\n</div>", 2, None, "<div>\n[1]\n</div>", ["s2"]),
    ],
    # So no form is left holding a stale number.
    "Forms models write (full-width, ranges, other digits) are all renumbered.": [
        ("A [2] B \u30101\u3011", 2, None, "A [1] B [2]", ["s2", "s1"]),
        ("\uff3b1\uff3d and \u30102\u3011", 2, None, "[1] and [2]", ["s1", "s2"]),
        ("\u30102\u3011(x)", 2, None, "\u30101\u3011(x)", ["s2"]),
        ("[1-3]", 3, None, "[1, 2, 3]", ["s1", "s2", "s3"]),
        ("[2\u20133] then [1]", 3, None, "[1, 2] then [3]", ["s2", "s3", "s1"]),
        ("[2-5]", 3, "[2, 3]", "[1, 2]", ["s2", "s3"]),
        ("[\u0661] and [\uff12]", 2, None, "[1] and [2]", ["s1", "s2"]),
    ],
    # A line left blank goes, bare structure keeps a zero-width space, and spaces stay
    # where the next character could join the previous.
    "Dropping a marker never changes the blocks.": [
        ("para\n[9]\nmore [1]", 1, "para\nmore [1]", "para\nmore [1]", ["s1"]),
        # ... but a paragraph's first line stays when the next line, moved up to where a
        # block begins, would start a list: "[1]" would then leave its code span.
        ("[9]\n2) `\n2) [1]`", 1, "\u200b\n2) `\n2) [1]`", "\u200b\n2) `\n2) [1]`", None),
        ("[9]\nmore [1]", 1, "more [1]", "more [1]", ["s1"]),
        # A line's first text keeps a zero-width space when text follows: " ```a" opens a
        # fence (up to three spaces may lead one), and everything after would be code.
        ("[9] ```a\nsee [1]", 1, "\u200b ```a\nsee [1]", "\u200b ```a\nsee [1]", ["s1"]),
        ("- [9]\n- b [1]", 1, "- \u200b\n- b [1]", "- \u200b\n- b [1]", ["s1"]),
        ("a`` [9]` b [1] ``` c", 1, "a`` ` b [1] ``` c", "a`` ` b [1] ``` c", ["s1"]),
        ("<http://x [9]>", 1, "<http://x >", "<http://x >", None),
        # A space in a marker kept "(...)" from being a link's destination: something that
        # is neither a title nor a ")" stays after a space where it was.
        ("[x](a[ 9 ]b) [1]", 1, "[x](a\u200b \u200bb) [1]", "[x](a\u200b \u200bb) [1]", ["s1"]),
        (
            "[x](\n[ 9 ]\n) [1]",
            1,
            "[x](\n\u200b \u200b\n) [1]",
            "[x](\n\u200b \u200b\n) [1]",
            ["s1"],
        ),
        ("[1](\na[1, 9])", 1, "[1](\na[ 1 ])", "[1](\na[ 1 ])", ["s1"]),
        # A no-break space is no space to a destination.
        ("[x](a\xa0[ 2 ]) [2]", 2, None, "[x](a\xa0[ 1 ]) [1]", ["s2"]),
        # A setext underline or a table's delimiter row reads with the line above it: the
        # heading stays a heading, and "| a |" does not become a table's header.
        ("[9]\n===\nsee [1]", 1, "\u200b\n===\nsee [1]", "\u200b\n===\nsee [1]", ["s1"]),
        (
            "| a |\n[9]\n|---|\n\n[1]",
            1,
            "| a |\n\u200b\n|---|\n\n[1]",
            "| a |\n\u200b\n|---|\n\n[1]",
            ["s1"],
        ),
        # ... or when every line from the first goes: "+ x" would start a list.
        ("[9]\n[9]\n+ x [1]", 1, "\u200b\n+ x [1]", "\u200b\n+ x [1]", ["s1"]),
        # ... or when the next line is indented: it would join an empty list item's text.
        ("+ \n[9]\n  a [1]", 1, "+ \n\u200b\n  a [1]", "+ \n\u200b\n  a [1]", ["s1"]),
        ("- \n  [9]\na [1]", 1, "- \n  \u200b\na [1]", "- \n  \u200b\na [1]", ["s1"]),
        # ... and a heading's first line stays too: "1." would start a list, "---" a rule.
        ("[9]\n1.\n---\n[1]", 1, "\u200b\n1.\n---\n[1]", "\u200b\n1.\n---\n[1]", ["s1"]),
        # A row's last cell stays a cell: "a|" would be a table's header of one column.
        ("a|[9]\n|---|\n\n[1]", 1, "a|\u200b\n|---|\n\n[1]", "a|\u200b\n|---|\n\n[1]", ["s1"]),
        # A backslash before a line end is a hard line break, before punctuation an escape.
        ("a\\ [9]\nb [1]", 1, "a\\ \nb [1]", "a\\ \nb [1]", ["s1"]),
        # "&#91;" is an entity, shown as "[".
        ("&#[9]91; [1]", 1, "&#\u200b91; [1]", "&#\u200b91; [1]", ["s1"]),
        # Line ends as written: a "\r\n" anywhere drops a line as "\n" does.
        ("a\r\n[9]\r\n> q [1]", 1, "a\r\n> q [1]", "a\r\n> q [1]", ["s1"]),
    ],
    # "*a *" shows its asterisks: a delimiter run after a space closes nothing.
    "Dropping a marker never unmakes the emphasis around it.": [
        ("*see the docs [9]*. [1]", 1, "*see the docs*. [1]", "*see the docs*. [1]", ["s1"]),
        ("**Note [1] [1]**", 1, None, "**Note [1]**", ["s1"]),
        ("~~old [9]~~ [1]", 1, "~~old~~ [1]", "~~old~~ [1]", ["s1"]),
        ("a *[9]* b [1]", 1, "a *\u200b* b [1]", "a *\u200b* b [1]", ["s1"]),
        # An opening run keeps the space before it: "a*b*" would join the words.
        ("a [9]*b* [1]", 1, "a *b* [1]", "a *b* [1]", ["s1"]),
    ],
}


@pytest.mark.parametrize(
    ("text", "count", "stripped", "final", "sources"),
    [
        pytest.param(*example, id=f"{rule} {example[0]!r}")
        for rule, examples in EXAMPLES.items()
        for example in examples
    ],
)
def test_examples(
    text: str, count: int, stripped: str | None, final: str, sources: list[str] | None
) -> None:
    got_stripped, result = run(text, count)
    assert got_stripped == (text if stripped is None else stripped)
    assert result.text == final
    if sources is None:
        assert result.fallback is True
        assert result.text == got_stripped
        assert result.sources == names(count)
        assert result.number_map == {}
    else:
        assert result.fallback is False
        assert result.sources == sources
        assert list(result.number_map.values()) == list(range(1, len(sources) + 1))


def test_number_map_maps_prompt_numbers_to_final_numbers() -> None:
    result = finalize_citations("[3] then [1, 3] then [4]", ["a", "b", "c", "d"])
    assert result == FinalizedCitations(
        "[1] then [2, 1] then [3]", ["c", "a", "d"], {3: 1, 1: 2, 4: 3}, False
    )


def test_finalize_drops_out_of_range_markers_it_is_given() -> None:
    result = finalize_citations("a [1] b [9] c [0, 1]", ["x"])
    assert result.text == "a [1] b c [1]"
    assert result.sources == ["x"]


def test_finalize_without_strip_leaves_only_out_of_range_markers_in_fallback() -> None:
    # Documented order: strip first. Without it, a text citing only missing sources is the
    # "cites nothing" fallback and keeps its (dangling) marker as written.
    result = finalize_citations("see [9]", ["x"])
    assert result == FinalizedCitations("see [9]", ["x"], {}, True)
    assert run("see [9]", 1) == ("see", FinalizedCitations("see", ["s1"], {}, True))


def test_finalize_does_not_mutate_or_alias_the_sources() -> None:
    sources = ["a", "b"]
    result = finalize_citations("nothing", sources)
    assert result.sources == sources
    assert result.sources is not sources
    finalize_citations("[2]", sources)
    assert sources == ["a", "b"]


@pytest.mark.parametrize(
    ("numbers", "expected"),
    [([1], "[1]"), ([1, 3], "[1, 3]"), ((2, 1, 2), "[2, 1, 2]"), ([12, 3], "[12, 3]")],
)
def test_format_marker(numbers: Sequence[int], expected: str) -> None:
    assert format_marker(numbers) == expected
    assert [m.numbers for m in iter_markers(expected)] == [tuple(numbers)]


def test_iter_markers_spans_and_numbers() -> None:
    text = "a [1] b [2,3][ 4 ] `[5]` [6](u) c"
    assert list(iter_markers(text)) == [
        Marker(2, 5, (1,)),
        Marker(8, 13, (2, 3)),
        Marker(13, 18, (4,)),
    ]


def test_cited_numbers_ignores_everything_that_is_not_a_marker() -> None:
    text = "`[1]` ``[2]`` [x](u) [3](u) ![4](u) [^5] \\[6] <http://x/[7]> [12345]\n```\n[8]\n```"
    assert cited_numbers(text) == []
    assert cited_numbers("[3] [1, 3] [2] [1]") == [3, 1, 2]


@pytest.mark.parametrize("unit", [" [9]", "[9]", "[9]\n", "a\n[9]\n- x\n"])
def test_dropping_markers_costs_work_in_proportion_to_the_answer(unit: str) -> None:
    """Many dropped markers in a row ("a [9] [9] ...") once made each drop look back over
    every earlier one: four times the answer cost sixteen times the work."""
    import answers.citations as citations
    from tests.helpers import lines_executed

    def work(repeats: int) -> int:
        text = "a" + unit * repeats
        return lines_executed(citations, lambda: strip_out_of_range_markers(text, 1))

    assert work(800) <= 5 * work(200)


def test_rewrite_markers_none_keeps_and_empty_drops_with_spaces() -> None:
    text = "a [1] b  [2] c\t[3]"
    assert rewrite_markers(text, lambda m: None) == text
    assert rewrite_markers(text, lambda m: "" if 2 in m.numbers else None) == "a [1] b c\t[3]"
    assert rewrite_markers(text, lambda m: f"<{m.numbers[0]}>") == "a <1> b  <2> c\t<3>"
    assert rewrite_markers(text, lambda m: "") == "a b c"


# --------------------------------------------------------------------------------------
# Generated answers
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One planned piece of an answer.

    ``kind`` is "text" (prose and separators: may be rewritten around markers), "marker"
    (``numbers`` are what it cites), "code" / "fence" (code), or "literal" (links, images,
    footnotes, escapes, autolinks: prose that must never be read as a marker).
    """

    kind: str
    text: str
    numbers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Answer:
    pieces: tuple[Piece, ...]

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self.pieces)

    def of_kind(self, *kinds: str) -> list[str]:
        return [piece.text for piece in self.pieces if piece.kind in kinds]


@dataclass(eq=False)
class Source:
    """A source compared by identity, like a retrieved chunk."""

    name: str

    def __repr__(self) -> str:
        return self.name


WORDS = ["see", "the", "answer", "is", "Django", "x", "a1", "42", ".", ",", ";", "?", "ok."]
CODE_BITS = ["a", "x", "[1]", "[2][2]", "[9]", "[0]", "[1, 3]", "[1,3]", " ", "b ", "f(x)"]
FENCE_LINES = [
    "x = a[1]",
    "print(a[0])",
    "[2][2]",
    "see [9].",
    "`[3]` and ``[4]``",
    "",
    "",
    "  [1, 3]",
    "[x](http://x) [4]",
    "\\[5]",
]
LITERALS = [
    "[text](http://x)",
    "[1](http://x)",
    "[0](http://x/a)",
    "[see [2]](http://x)",
    "![img](http://x/i.png)",
    "![1](http://x/i.png)",
    "![fig [3]](http://x)",
    "[^1]",
    "[^2]",
    "[^note]",
    "\\[1]",
    "\\[9]",
    "\\[1, 2]",
    "<http://x/[1]>",
    "[12345]",  # more than four digits: not a marker
    "[1, 23456]",
    "[a]",
]

markers = st.builds(
    lambda numbers, sep, pad: Piece(
        "marker",
        "[" + sep.join(str(n).zfill(2) if pad else str(n) for n in numbers) + "]",
        tuple(numbers),
    ),
    st.lists(st.integers(0, 15), min_size=1, max_size=3),
    st.sampled_from([", ", ",", " , "]),
    st.sampled_from([False, False, False, True]),  # zero-padded: [01]
)


@st.composite
def code_spans(draw: st.DrawFn) -> Piece:
    content = "".join(draw(st.lists(st.sampled_from(CODE_BITS), min_size=1, max_size=3)))
    if draw(st.booleans()):
        return Piece("code", "`" + content + "`")
    # Double-backtick span with a single backtick inside (never next to the delimiters).
    tail = "".join(draw(st.lists(st.sampled_from(CODE_BITS), min_size=1, max_size=2)))
    inner = content.strip() or "a"
    return Piece(
        "code", "``" + draw(st.sampled_from(["", " "])) + inner + "`" + tail.strip() + "x``"
    )


@st.composite
def fences(draw: st.DrawFn) -> Piece:
    mark = draw(st.sampled_from(["```", "````", "~~~", "~~~~"]))
    char = mark[0]
    info = draw(st.sampled_from(["", "py", "python title=x", " js"]))
    lines = draw(st.lists(st.sampled_from(FENCE_LINES), max_size=4))
    if len(mark) > 3 and draw(st.booleans()):
        lines.append(char * 3)  # a shorter run does not close a longer fence
    lines.append(("~~~" if char == "`" else "```") * draw(st.integers(0, 1)))
    indent = " " * draw(st.sampled_from([0, 0, 1, 3]))
    close = " " * draw(st.sampled_from([0, 2])) + mark + char * draw(st.integers(0, 1))
    return Piece("fence", indent + mark + info + "\n" + "\n".join(lines) + "\n" + close)


segments = st.one_of(
    st.sampled_from(WORDS).map(lambda w: [Piece("text", w)]),
    markers.map(lambda m: [m]),
    markers.map(lambda m: [m]),
    markers.map(lambda m: [m, Piece("text", ""), m]),  # a duplicate: [2][2]
    st.lists(markers, min_size=2, max_size=3),  # a cluster: [1][3], [2] [1, 2]
    code_spans().map(lambda c: [c]),
    fences().map(lambda f: [f]),
    st.sampled_from(LITERALS).map(lambda text: [Piece("literal", text)]),
)


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    """A Markdown-ish answer, with separators that keep every piece what it was planned as."""
    pieces: list[Piece] = []
    for segment in draw(st.lists(segments, max_size=18)):
        for piece in segment:
            if not pieces or (piece.kind == "text" and piece.text == ""):
                pieces.append(piece)
                continue
            previous = pieces[-1]
            if previous.kind == "text" and previous.text == "":
                pieces.append(piece)
                continue
            kinds = {previous.kind, piece.kind}
            if "fence" in kinds:
                choices = ["\n", "\n\n"]  # fences sit on their own lines
            elif "code" in kinds:
                choices = [" ", "\n", "\n\n", " \t"]  # touching backticks would merge
            else:
                choices = [" ", "", "", "\n", "\n\n", "  ", "\t"]
            pieces.append(Piece("text", draw(st.sampled_from(choices))))
            pieces.append(piece)
    return Answer(tuple(pieces))


# Few sources (most markers out of range) or many (most markers valid).
counts = st.one_of(st.integers(0, 3), st.integers(4, 15))


# --------------------------------------------------------------------------------------
# A reference model over the plan
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Modelled:
    stripped: str
    text: str
    order: list[int]
    # For each marker left in the final text: the prompt numbers it stands for.
    final_markers: list[tuple[int, ...]]


_SAFE_AFTER = set(" \t\n.,;:!?")
_STRUCTURE = re.compile(r"[ \t>*+\-=_#~`\d.)|:]*")


def _moved_up_changes_blocks(text: str, line_start: int, following: str, left: str) -> bool:
    """Whether removing the lines from ``line_start`` (a paragraph's or heading's first
    line; ``left`` what remains of the last) would put ``following`` where a block begins
    and so read it as something else. Indented, it might join a list item above (or have
    been lazy)."""
    first_lines = {
        t.map[0]
        for t in _MARKDOWN.parse(text)
        if t.type in ("paragraph_open", "heading_open") and t.map
    }
    if text.count("\n", 0, line_start) not in first_lines:
        return False
    if following.startswith((" ", "\t")) or left.startswith((" ", "\t")):
        return True
    alone = _MARKDOWN.parse(following)
    return not alone or alone[0].type != "paragraph_open"


def apply_drops(text: str, spans: list[tuple[int, int, str | None]]) -> str:
    """The drop rules of ADR 0004, written over planned spans (start, end, replacement):
    ``None`` keeps, ``""`` drops. A line left blank goes with its line break, except the
    first line of a paragraph followed by a line that, moved up to where a block begins,
    would not begin a paragraph: that one, and a line left
    with only structure, keep a zero-width space for the first dropped marker; otherwise a
    dropped marker takes the spaces before it when a space, a line end or closing
    punctuation follows it."""
    lines: dict[int, list[tuple[int, int]]] = {}
    for start, end, replacement in spans:
        if replacement == "":
            lines.setdefault(text.rfind("\n", 0, start) + 1, []).append((start, end))
    fate: dict[int, object] = {}
    run_first, run_end = 0, -1  # consecutive removed lines: the first one's start, the end
    for line_start, dropped in lines.items():
        line_end = text.find("\n", line_start)
        line_end = len(text) if line_end == -1 else line_end
        left, position = "", line_start
        for start, end in dropped:
            left += text[position:start]
            position = end
        left += text[position:line_end]
        if line_start != run_end:
            run_first = line_start
        if not left.strip(" \t"):
            fate[line_start] = run_end = min(line_end + 1, len(text))
            following = text[line_end + 1 :].split("\n", 1)[0] if line_end < len(text) else ""
            if following.strip() and _moved_up_changes_blocks(text, run_first, following, left):
                fate[line_start] = "\u200b"
                run_end = -1
        elif _STRUCTURE.fullmatch(left):
            fate[line_start] = "\u200b"
    # A run of adjacent dropped markers is judged by what follows the whole run.
    run_end = [end for _, end, _ in spans]
    for i in range(len(spans) - 2, -1, -1):
        if spans[i + 1][2] == "" and spans[i + 1][0] == spans[i][1]:
            run_end[i] = run_end[i + 1]
    out, position = [], 0
    for i, (start, end, replacement) in enumerate(spans):
        if replacement is None or start < position:
            continue
        between = text[position:start]
        if replacement == "":
            line_start = text.rfind("\n", 0, start) + 1
            line_fate = fate.pop(line_start, None)
            if isinstance(line_fate, int):
                out.append(text[position:line_start])
                position = line_fate
                continue
            after = text[run_end[i] : run_end[i] + 1]
            before = text[line_start:start]
            if line_fate is not None:
                replacement = str(line_fate)
            elif _STRUCTURE.fullmatch(before) and text[run_end[i] :].split("\n", 1)[0].strip():
                replacement = "\u200b"  # "[9]- x" and "[9] ```" must not start a block
            else:
                if (after == "" or after in _SAFE_AFTER) and not _STRUCTURE.fullmatch(
                    before.rstrip(" \t")
                ):
                    between = between.rstrip(" \t")
                left = between[-1:] or "".join(out)[-1:]
                if after == ")" and before.strip():
                    replacement = "\u200b"  # "[x](a [9])" must not become a link
                elif (
                    left.strip()
                    and after.strip()
                    and (left in "<&" or after == ">" or left + after in ("``", "](", "!["))
                ):
                    replacement = "\u200b"  # "``[9]`" must not become one run
        out.extend((between, replacement))
        position = end
    out.append(text[position:])
    return "".join(out)


def planned_spans(pieces: Sequence[Piece]) -> list[tuple[int, int, Piece]]:
    spans, position = [], 0
    for piece in pieces:
        if piece.kind == "marker":
            spans.append((position, position + len(piece.text), piece))
        position += len(piece.text)
    return spans


def model(answer: Answer, count: int) -> Modelled:
    text = answer.text
    strip_spans: list[tuple[int, int, str | None]] = []
    kept_numbers: list[tuple[int, ...]] = []
    for start, end, piece in planned_spans(answer.pieces):
        kept = tuple(n for n in piece.numbers if 1 <= n <= count)
        if len(kept) == len(piece.numbers):
            strip_spans.append((start, end, None))
        else:
            strip_spans.append((start, end, "[" + ", ".join(map(str, kept)) + "]" if kept else ""))
        if kept:
            kept_numbers.append(kept)
    stripped_text = apply_drops(text, strip_spans)

    order: list[int] = []
    for numbers in kept_numbers:
        order.extend(n for n in numbers if n not in order)
    if not order:
        return Modelled(stripped_text, stripped_text, [], [])
    new_of = {old: new for new, old in enumerate(order, start=1)}

    # The stripped text's markers, in order: find them by the plan, not by scanning.
    stripped_markers = [m for m in _planned_after_strip(text, strip_spans)]
    finalize_spans: list[tuple[int, int, str | None]] = []
    final_markers: list[tuple[int, ...]] = []
    previous_end, cluster = -1, set()
    for (start, end), numbers in zip(stripped_markers, kept_numbers, strict=True):
        if previous_end < 0 or stripped_text[previous_end:start].strip(" \t"):
            cluster = set()
        previous_end = end
        olds = tuple(dict.fromkeys(n for n in numbers if new_of[n] not in cluster))
        cluster.update(new_of[n] for n in olds)
        if olds:
            finalize_spans.append((start, end, "[" + ", ".join(str(new_of[n]) for n in olds) + "]"))
            final_markers.append(olds)
        else:
            finalize_spans.append((start, end, ""))
    return Modelled(stripped_text, apply_drops(stripped_text, finalize_spans), order, final_markers)


def _planned_after_strip(
    text: str, spans: list[tuple[int, int, str | None]]
) -> list[tuple[int, int]]:
    """Where each kept marker lands in ``apply_drops(text, spans)``."""
    found = []
    for index, (start, end, replacement) in enumerate(spans):
        if replacement == "":
            continue
        # Mark this marker with sentinels, apply the same drops, and find the sentinels.
        sentinel = "\ue000" + (replacement or text[start:end]) + "\ue001"
        marked = [*spans[:index], (start, end, sentinel), *spans[index + 1 :]]
        out = apply_drops(text, marked)
        begin = out.index("\ue000")
        found.append((begin, out.index("\ue001") - 1))
    return found


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

# The renderer's configuration (answers.citations.markdown_parser), without its marker rule.
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_MARKDOWN.disable(["code", "reference"])


def markdown_code(text: str) -> list[tuple[str, str]]:
    """Fenced blocks and code spans, as the renderer's Markdown parser sees them."""
    found: list[tuple[str, str]] = []
    for token in _MARKDOWN.parse(text):
        if token.type == "fence":
            found.append(("fence", token.info + "\n" + token.content))
        for child in token.children or []:
            if child.type == "code_inline":
                found.append(("code", child.content))
    return found


def in_order(needles: list[str], haystack: str) -> bool:
    position = 0
    for needle in needles:
        found = haystack.find(needle, position)
        if found == -1:
            return False
        position = found + len(needle)
    return True


def sources_for(count: int) -> list[Source]:
    return [Source(f"s{i}") for i in range(1, count + 1)]


@settings(deadline=None)
@given(answers(), counts)
def test_matches_the_reference_model(answer: Answer, count: int) -> None:
    sources = sources_for(count)
    expected = model(answer, count)
    stripped = strip_out_of_range_markers(answer.text, count)
    assert stripped == expected.stripped
    result = finalize_citations(stripped, sources)
    assert result.text == expected.text
    assert result.fallback is (not expected.order)
    assert result.sources == ([sources[n - 1] for n in expected.order] or sources)
    assert list(result.number_map) == expected.order
    # 7. every final marker cites exactly the sources its original marker cited.
    final = [marker.numbers for marker in iter_markers(result.text)]
    if result.fallback:
        assert final == []
    else:
        assert len(final) == len(expected.final_markers)
        for new_numbers, old_numbers in zip(final, expected.final_markers, strict=True):
            assert [result.sources[j - 1] for j in new_numbers] == [
                sources[n - 1] for n in old_numbers
            ]


@settings(deadline=None)
@given(answers())
def test_the_scanner_finds_exactly_the_planned_markers(answer: Answer) -> None:
    text = answer.text
    found = list(iter_markers(text))
    assert [m.numbers for m in found] == [p.numbers for p in answer.pieces if p.kind == "marker"]
    assert [text[m.start : m.end] for m in found] == answer.of_kind("marker")
    assert cited_numbers(text) == list(dict.fromkeys(n for m in found for n in m.numbers))
    # The generator's code really is code to Markdown (else the test above proves little).
    assert len(markdown_code(text)) == len(answer.of_kind("code", "fence"))


@settings(deadline=None)
@given(answers(), counts)
def test_strip_leaves_only_numbers_in_range(answer: Answer, count: int) -> None:
    stripped = strip_out_of_range_markers(answer.text, count)
    for marker in iter_markers(stripped):
        assert marker.numbers
        assert all(1 <= n <= count for n in marker.numbers)
    # Valid markers are kept as written, and strip is idempotent.
    if all(1 <= n <= count for m in iter_markers(answer.text) for n in m.numbers):
        assert stripped == answer.text
    assert strip_out_of_range_markers(stripped, count) == stripped


@settings(deadline=None)
@given(answers(), counts)
def test_finalize_keeps_cited_sources_renumbered_in_first_citation_order(
    answer: Answer, count: int
) -> None:
    sources = sources_for(count)
    stripped = strip_out_of_range_markers(answer.text, count)
    result = finalize_citations(stripped, sources)
    cited = cited_numbers(stripped)

    # 4. the fallback applies iff the stripped text cites nothing; then nothing changes.
    assert result.fallback is (cited == [])
    if result.fallback:
        assert result.text == stripped
        assert result.sources == sources
        assert all(a is b for a, b in zip(result.sources, sources, strict=True))
        assert result.number_map == {}
        return

    k = len(result.sources)
    # 2. sources are a sub-list of the input, each at most once; references are 1..k.
    assert len({id(s) for s in result.sources}) == k
    positions = [next(i for i, s in enumerate(sources) if s is r) for r in result.sources]
    assert sorted(positions) == sorted(set(positions))
    assert sorted(result.number_map.values()) == list(range(1, k + 1))
    assert list(result.number_map) == cited
    # 3. first citations appear in order, and 4. every kept source is cited.
    assert cited_numbers(result.text) == list(range(1, k + 1))
    for marker in iter_markers(result.text):
        assert all(1 <= n <= k for n in marker.numbers)
        assert len(set(marker.numbers)) == len(marker.numbers)
    # 7. number_map sends each prompt number to the same source object.
    for old, new in result.number_map.items():
        assert result.sources[new - 1] is sources[old - 1]


@settings(deadline=None)
@given(answers(), counts)
def test_strip_and_finalize_are_idempotent(answer: Answer, count: int) -> None:
    _, result = run(answer.text, count)
    again = finalize_citations(
        strip_out_of_range_markers(result.text, len(result.sources)), result.sources
    )
    assert again.text == result.text
    assert again.sources == result.sources
    if not result.fallback:
        assert again.number_map == {n: n for n in range(1, len(result.sources) + 1)}


@settings(deadline=None)
@given(answers(), counts)
def test_code_links_footnotes_and_escapes_are_byte_identical(answer: Answer, count: int) -> None:
    _, result = run(answer.text, count)
    # 6. every planned code piece and literal survives unchanged, in order ...
    assert in_order(answer.of_kind("code", "fence"), result.text)
    assert in_order(answer.of_kind("literal"), result.text)
    assert in_order(answer.of_kind("code", "fence", "literal"), result.text)
    # ... and Markdown sees exactly the same code before and after.
    assert markdown_code(result.text) == markdown_code(answer.text)
    # Only markers and the spaces before dropped ones change: the rest is the same text.
    prose = re.compile(r"[^\s\[\]0-9,\u200b]+")
    assert "".join(prose.findall(result.text)) == "".join(prose.findall(answer.text))


# Ideographic spaces ("[\u30009\u3000]", as CJK answers write them) are no whitespace to a link
# destination, so the look back for "](" ran over every earlier marker of the line; a
# marker respelled without its spaces ("[\u30002\u3000]" -> "[1]", "[1,\u30009]" -> "[1]")
# looked back the same way.
@pytest.mark.parametrize(
    ("unit", "count", "step"),
    [
        ("a[\u30009\u3000]", 1, "strip"),
        ("a[1,\u30009]", 1, "strip"),
        ("a[\u30002\u3000]", 2, "finalize"),
        ("(a[\u30009\u3000])", 1, "strip"),
    ],
)
def test_markers_with_spaces_cost_work_in_proportion_to_the_answer(
    unit: str, count: int, step: str
) -> None:
    import answers.citations as citations
    from tests.helpers import lines_executed

    def work(repeats: int) -> int:
        text = "[2] x " + unit * repeats
        if step == "strip":
            return lines_executed(citations, lambda: strip_out_of_range_markers(text, count))
        return lines_executed(citations, lambda: finalize_citations(text, names(count)))

    assert work(800) <= 5 * work(200)
