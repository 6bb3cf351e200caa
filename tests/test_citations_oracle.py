"""One definition of prose, proven against the renderer's parser (issue 12, ADR 0004).

The oracle is markdown-it with exactly the renderer's configuration but without the
citation rule, and with ``text_join`` off so that escapes and entities stay tokens of their
own. A marker is a marker-shaped string inside one of its plain ``text`` tokens, outside
link text and image descriptions. For hypothesis-generated Markdown (fences in lists and
quotes, tildes, backtick runs of every length, headings, tables, HTML, reference-style
lines, links with parentheses and titles, images, autolinks, escapes, entities, full-width
and range markers) the module must read exactly those, and the rendered page must link
exactly the markers the final text keeps.
"""

from __future__ import annotations

from bs4 import BeautifulSoup
from hypothesis import example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from answers.citations import (
    MARKER_RE,
    finalize_citations,
    iter_markers,
    strip_out_of_range_markers,
)
from answers.rendering import render_answer_html

ORACLE = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
ORACLE.enable(["table", "strikethrough"]).disable(["code", "reference", "text_join"])


def oracle_markers(text: str) -> list[str]:
    """Marker-shaped strings in the renderer's plain text, in order."""
    found: list[str] = []
    for block in ORACLE.parse(text):
        if block.type != "inline":
            continue
        depth = 0
        for child in block.children or []:
            if child.type == "link_open":
                depth += 1
            elif child.type == "link_close":
                depth -= 1
            elif child.type == "text" and depth == 0:
                found.extend(match[0] for match in MARKER_RE.finditer(child.content))
    return found


def oracle_code(text: str) -> list[str]:
    found: list[str] = []
    for block in ORACLE.parse(text):
        if block.type in ("fence", "code_block"):
            found.append(block.content)
        for child in block.children or []:
            if child.type == "code_inline":
                found.append(child.content)
    return found


def oracle_links(text: str) -> list[str]:
    """The destinations of the renderer's links, in order."""
    return [
        str(child.attrs.get("href"))
        for block in ORACLE.parse(text)
        for child in block.children or []
        if child.type == "link_open"
    ]


def module_markers(text: str) -> list[str]:
    return [text[m.start : m.end] for m in iter_markers(text)]


INLINE = [
    "a", "word", "x.", " ", "  ", "\t", ",", "[1]", "[2]", "[3]", "[12]", "[1, 2]", "[ 2 ]",
    "[1-2]", "[2\u20133]", "\u30101\u3011", "\uff3b2\uff3d", "[\u0661]", "[", "]", "(", ")",
    "](u)", '](u "t [1]")', "](<u v>)", "[x](u)", "[x](u_(p)[1])", "![i [1]](u)",
    "![i](u)", "<http://x/[1]>", "<a@b.co>", "<", ">", "\\[1]", "\\\\", "\\", "`", "``",
    "```", "`[1]`", "``[2]``", "*", "_", "**", "~~", "~", "&#91;1]", "&amp;", "|", "[^1]",
    ":", "[1]:", " http://x", ' "t"', "[2](", "<div>", "#",
]  # fmt: skip
PREFIXES = [
    "", "", "", "> ", "- ", "* ", "1. ", "2) ", "  ", "    ", "> > ", "- > ", "> - ", "# ",
    "## ", "```", "~~~", "````py", "   ```", "| ", "|---|", "| --- | --- |", "---", "***",
    "===", "   ", "[1]: ", "\t",
]  # fmt: skip


def markdown_documents(prefixes: list[str], pieces: list[str]) -> st.SearchStrategy[str]:
    """Up to ten lines, each a block prefix followed by inline pieces."""
    line = st.builds(
        lambda prefix, parts: prefix + "".join(parts),
        st.sampled_from(prefixes),
        st.lists(st.sampled_from(pieces), max_size=8),
    )
    return st.lists(line, max_size=10).map("\n".join)


documents = markdown_documents(PREFIXES, INLINE)


@settings(max_examples=1500, deadline=None)
@given(documents)
# A fence opener is a table's header row when a delimiter row follows (found by this test).
@example("```|[1]\n| --- | --- |")
@example("~~~|[1]\n|---|---|")
# A lone carriage return is a line break to the parser: it closes a fence and starts a
# block inside a code span or link text (found by a longer run of these properties).
@example("```\nx\r```\n[1]")
@example("`a\r- [1]`")
@example("[a\r~~~](u) [1]")
# A label is measured skipping autolinks: this is no link, and "[1]" is in the autolink.
@example("[<http://x](u)[1]y>")
# No autolink, so its full-width marker is text (the fast path skipped it as one).
@example("<\u30101\u3011-->")
def test_the_module_reads_exactly_the_markers_the_renderer_shows_as_text(text: str) -> None:
    assert module_markers(text) == oracle_markers(text)


def _render(text: str, count: int) -> BeautifulSoup:
    html = render_answer_html(text, anchor_prefix="a-1-source", source_count=count)
    return BeautifulSoup(html, "html.parser")


@settings(max_examples=600, deadline=None)
@given(documents, st.integers(0, 4))
# Dropping "[1][1]" must not join the backticks either side into one run.
@example("`[1]`[1][1]`", 0)
@example("[2]([ 2 ]`[1]`)", 2)
# A line after a lone carriage return starts at it: dropping "[1]" keeps the indentation
# that holds "x" and the fence in the list item (found by a longer run).
@example("- a\n\r  [1] x\n  ```\nb", 0)
# "\r\n" is one line break before a destination: "[ 2 ]" keeps its spaces, or "[1]"
# would become the link's destination (found by a longer run).
@example("a [2] [x](\r\n[ 2 ])", 3)
def test_the_page_links_exactly_the_markers_the_final_text_keeps(text: str, count: int) -> None:
    stripped = strip_out_of_range_markers(text, count)
    result = finalize_citations(stripped, list(range(count)))
    # What the rules changed is prose only: the renderer sees the same code.
    assert oracle_code(result.text) == oracle_code(text)
    # ... and the same links: no marker dropped or respelled makes or unmakes one.
    assert oracle_links(result.text) == oracle_links(text)
    # The final text's markers are exactly the renderer's text markers ...
    assert module_markers(result.text) == oracle_markers(result.text)
    soup = _render(result.text, len(result.sources))
    linked = [int(a.get_text()) for a in soup.select("a.citation")]
    kept = [n for m in iter_markers(result.text) for n in m.numbers]
    # ... and the page links each of their numbers, nowhere else.
    assert linked == kept
    for link in soup.select("a.citation"):
        assert link.find_parent(["code", "pre"]) is None
        assert link.find_parent("a") is None
    if not result.fallback:
        assert all(1 <= n <= len(result.sources) for n in kept)


def _tokens_text(tokens: list[Token]) -> str:
    return "".join(t.content for t in tokens)


def test_the_oracle_sees_what_the_issue_describes() -> None:
    # The oracle itself, on the issue's examples: the numbers in code are not text.
    text = "1. Install:\n\n    ```python\n    x = a[2]\n\n    y = 1\n    ```\n\nSee [1]."
    assert oracle_markers(text) == ["[1]"] == module_markers(text)
    text = "Wrap the code in ``` like this:\n```python\nx = 1\n```\nThis works [2] and [9]."
    assert oracle_markers(text) == ["[2]", "[9]"] == module_markers(text)
    assert oracle_markers("[wiki](https://x/Foo_(bar)[9]) [1]") == ["[1]"]


# --- The fast path for plain answers ----------------------------------------------------

PLAIN = [
    "a", "word", "x.", " ", ",", "[1]", "[2]", "[12]", "[1, 2]", "[1-2]", "[", "]", "(", ")",
    "`", "`a[1]`", "`b [2] c`", "[x](u)", "[1](http://x/a)", "![i](u)", "[see](u (x))",
    "*", "_", "**", "~~", "&#91;1]", "!", ":", "-", "#", "=", "1.", "``", "|", "<", "\\",
    ">", "a|b", "<http://x>", "<http://x[1]>", "<a@b.c>", "<x`>", "x < y", "<c 'i'>", "<",
    "\\[1]", "\\\\", "\\`", "\\]", "\\(", "\\", "[a\\](u)", "`a\\`", "<h:`x`>",
]  # fmt: skip
PLAIN_PREFIXES = [
    "", "", "", "", " ", "   ", "    ", "```", "~~~", "```py", "- ", "> ", "# ", "|", ":-",
    "-|-", "| --- |", "a | b", "*", "**", "***", "* *", "-", "--", "--x", "-1", "_", "___",
    "_x", "=", "==", "=x", "#x", "#", "####### ", "3.", "3.1", "2)", "+", "+x", "~", "~~",
    "|x", "| +--+", ":", ":x", "*cls*", "**b**",
]  # fmt: skip
plain_documents = markdown_documents(PLAIN_PREFIXES, PLAIN)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(plain_documents, documents))
# A list item ends the paragraph, so no code span runs into it (found by this test).
@example("`[1]\n- `")
# Indented code is off: a closing fence indented by a tab still closes (found by this test).
@example("```\n\t```\n[1]: ")
@example("```\n      ```\nfoo [1]")
@example("```\n```\r[1]")
@example("`a\r- [1]`")
@example("[a\r~~~](u) [1]")
@example("[<http://x](u)[1]y>")
def test_the_fast_path_agrees_with_the_parser_whenever_it_answers(text: str) -> None:
    from answers.citations import _analyze, _fast_markers

    fast = _fast_markers(text)
    if fast is not None:
        assert fast == _analyze(text).markers
        assert module_markers(text) == oracle_markers(text)


# Answers of several blocks: plain parts and parts only the parser reads, apart.
mixed_answers = st.lists(st.one_of(plain_documents, documents), min_size=1, max_size=6).map(
    "\n\n".join
)


@settings(max_examples=1000, deadline=None)
@given(mixed_answers)
# A fence inside a list ends with the list; the next fence is top-level and runs on.
@example("- a\n\n  ```\nx\n\nb\n```\n\nfoo [1]\n```\n\nbar [2]")
@example("```\n\nfoo [1]\n\nbar [2]")
@example("- x\n\nfoo [1]\n\n> q [2]\n\nend [3]")
def test_reading_an_answer_in_parts_agrees_with_one_parse(text: str) -> None:
    from answers.citations import _analyze, _segmented_markers

    assert _segmented_markers(text) == _analyze(text).markers
    assert module_markers(text) == oracle_markers(text)


# --- Where indented code being off, and line breaks, change the reading ----------------

# With indented code off, any indentation (spaces or tabs) still opens or closes a fence, a
# quote or a list item, while a paragraph's continuation line indented four or more never
# starts a block; a lone "\r" or "\r\n" is one line break to the parser.
INDENTS = ["", "", " ", "   ", "    ", "      ", "\t", " \t", "\t\t"]
CONSTRUCTS = [
    "", "", "> ", "- ", "-\t", "1. ", "2) ", "# ", "#\t", "```", "````", "~~~", "```py", "---",
    "===", "--", "| ", "|---|", "| --- | --- |", "[1]: ", "<div>", "\\", "> ```", "- ```",
]  # fmt: skip
LINE_BREAKS = ["\n", "\n", "\n\n", "\r\n", "\r", "\n \n", "\n\t\n", "\r\n\r\n"]
EDGE_INLINE = [
    *INLINE, "\uff3b1\uff3d", "\uff3b", "\uff3d", "\u3010", "\u3011", "[\uff11]", "\\\uff3b1]",
    "\x00",
]  # fmt: skip


@st.composite
def block_edges(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        line = draw(st.sampled_from(INDENTS)) + draw(st.sampled_from(CONSTRUCTS))
        piece = st.one_of(st.sampled_from(["`", "[1]", "[a", "](u)"]), st.sampled_from(EDGE_INLINE))
        line += "".join(draw(st.lists(piece, max_size=5)))
        lines.append(line + draw(st.sampled_from(LINE_BREAKS)))
    return "".join(lines)


# Plain answers, with each line break written "\r\n" or "\r".
carriage_return_documents = plain_documents.flatmap(
    lambda text: st.sampled_from(["\r\n", "\r"]).map(lambda eol: text.replace("\n", eol))
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(block_edges(), carriage_return_documents))
# A fence's closing line ends with "\r\n": the fast path read the rest as code.
@example("```\r\n```\r\n[1]")
def test_indentation_and_line_breaks_read_as_the_renderer_reads_them(text: str) -> None:
    from answers.citations import _analyze, _fast_markers, _segmented_markers

    assert module_markers(text) == oracle_markers(text)
    fast = _fast_markers(text)
    assert fast is None or fast == _analyze(text).markers
    assert _segmented_markers(text) == _analyze(text).markers


@settings(max_examples=300, deadline=None)
@given(documents.map(lambda text: text.replace("\r", "")), st.integers(0, 3))
# A "\r" anywhere made every line count as a paragraph's first line: "[1]" kept a line.
@example("a\n[1]\n> ", 0)
def test_line_ends_written_as_crlf_are_stripped_and_renumbered_alike(text: str, count: int) -> None:
    crlf = text.replace("\n", "\r\n")
    stripped = strip_out_of_range_markers(text, count)
    assert strip_out_of_range_markers(crlf, count) == stripped.replace("\n", "\r\n")
    final = finalize_citations(stripped, list(range(count))).text
    crlf_stripped = stripped.replace("\n", "\r\n")
    assert finalize_citations(crlf_stripped, list(range(count))).text == final.replace("\n", "\r\n")
