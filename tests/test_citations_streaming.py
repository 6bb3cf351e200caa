from __future__ import annotations

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from answers.citations import (
    MarkerStreamFilter,
    cited_numbers,
    iter_markers,
    strip_out_of_range_markers,
)

# Pieces that stress every rule that holds text back: markers split anywhere, links and
# destinations, footnotes, code spans and fences, escapes, autolinks, spaces before markers.
PIECES = st.sampled_from(
    ["a", "b ", " ", " \t", "[1]", "[9]", "[", "]", "(u)", "(", ")", "`", "``", "\\", "<",
     "http:x", ">", "\n", "\n\n", "```\n", "~~~\n", ",", "2", " [2, 9]", "[^1]", "!", ":"]
)  # fmt: skip


@st.composite
def split_answers(draw):  # type: ignore[no-untyped-def]
    raw = "".join(draw(st.lists(PIECES, max_size=30)))
    cuts = sorted(draw(st.sets(st.integers(0, len(raw)), max_size=10)))
    bounds = [0, *cuts, len(raw)]
    return raw, [raw[i:j] for i, j in itertools.pairwise(bounds)]


def stream(deltas: list[str], count: int) -> tuple[str, list[str]]:
    stream_filter = MarkerStreamFilter(count)
    shown = [stream_filter.feed(delta) for delta in deltas]
    shown.append(stream_filter.close())
    return "".join(shown), shown


@settings(max_examples=400, deadline=None)
@given(split_answers(), st.integers(0, 3))
def test_any_split_streams_exactly_the_stripped_text(case, count):
    raw, deltas = case
    joined, _ = stream(deltas, count)
    assert joined == strip_out_of_range_markers(raw, count)


@settings(max_examples=200, deadline=None)
@given(split_answers(), st.integers(0, 3))
def test_what_is_shown_is_never_taken_back(case, count):
    """Every intermediate state is a prefix of the final stripped text: nothing shown is
    later removed (an out-of-range marker included)."""
    raw, deltas = case
    _, shown = stream(deltas, count)
    final = strip_out_of_range_markers(raw, count)
    so_far = ""
    for piece in shown:
        so_far += piece
        assert final.startswith(so_far)


def test_a_shown_marker_is_always_in_range():
    stream_filter = MarkerStreamFilter(2)
    shown = "".join(stream_filter.feed(d) for d in ["a [1", "] b [3", "] c [2]", " d"])
    assert [m.numbers for m in iter_markers(shown)] == [(1,), (2,)]


def test_an_unfinished_marker_is_held_until_complete():
    stream_filter = MarkerStreamFilter(2)
    assert stream_filter.feed("see [") == "see"
    assert stream_filter.feed("9") == ""
    assert stream_filter.feed("] and [1") == " and"
    assert stream_filter.feed("] ok") == " [1] ok"
    assert stream_filter.close() == ""


def test_a_complete_marker_waits_for_the_next_character():
    stream_filter = MarkerStreamFilter(1)
    assert stream_filter.feed("x [1]") == "x"
    assert stream_filter.feed("(http://a)") == " [1](http://a)"  # a link, not a citation


def test_new_citations_are_reported_once_in_first_citation_order():
    stream_filter = MarkerStreamFilter(3)
    emitted = stream_filter.feed("a [2] b [1] c [2] d ")
    assert stream_filter.take_new_citations() == [2, 1]
    emitted += stream_filter.feed("[3] e")
    assert stream_filter.take_new_citations() == [3]
    assert cited_numbers(emitted) == [2, 1, 3]


# --- Block structure while streaming (issue 12) -----------------------------------------

from tests.test_citations_oracle import documents  # noqa: E402


@st.composite
def split_documents(draw):  # type: ignore[no-untyped-def]
    raw = draw(documents)
    cuts = sorted(draw(st.sets(st.integers(0, len(raw)), max_size=12)))
    bounds = [0, *cuts, len(raw)]
    return raw, [raw[i:j] for i, j in itertools.pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(split_documents(), st.integers(0, 3))
# A backtick in a link's label may still open a code span that swallows its "]": the
# link and the marker after it wait (found by cutting streams at every position).
@example(("a[`](u)[1]a`", ["a[`](u)[1]a", "`"]), 0)
# A table whose delimiter row is still being written may vanish, and the paragraph it
# interrupted run on into a code span (found by cutting streams at every position).
@example(("a`a[1, 2]\n| --- |\n:-`", ["a`a[1, 2]\n| --- |\n:-", "`"]), 0)
@example(("`[1]\n-|-\n-|-`", ["`[1]\n-|-\n-|-", "`"]), 0)
def test_any_split_of_any_markdown_streams_the_stripped_text_and_never_takes_it_back(case, count):
    raw, deltas = case
    stream_filter = MarkerStreamFilter(count)
    final = strip_out_of_range_markers(raw, count)
    so_far, citations = "", []
    for delta in [*deltas, None]:
        so_far += stream_filter.feed(delta) if delta is not None else stream_filter.close()
        assert final.startswith(so_far)
        citations += stream_filter.take_new_citations()
    assert so_far == final
    # Citations are announced once each, in first-citation order of the stripped text.
    assert citations == cited_numbers(final)


def test_a_carriage_return_later_does_not_change_a_line_already_shown():
    # A "\r" anywhere once made every line count as a paragraph's first: the "[9]" line,
    # removed while streaming, kept a zero-width space in the stored text.
    raw = "a\n[9]\n> q\n\nlater\r\n"
    stream_filter = MarkerStreamFilter(1)
    shown = "".join(stream_filter.feed(char) for char in raw) + stream_filter.close()
    assert shown == strip_out_of_range_markers(raw, 1) == "a\n> q\n\nlater\r\n"


def test_a_line_dropped_before_a_setext_underline_streams_as_stored():
    # "[9]\n1." is a paragraph, so its first line keeps a zero-width space ("1." alone
    # would start a list); "---" then makes it a heading, whose first line kept one too.
    raw = "[9]\n1.\n---"
    stream_filter = MarkerStreamFilter(1)
    shown = "".join(stream_filter.feed(char) for char in raw) + stream_filter.close()
    assert shown == strip_out_of_range_markers(raw, 1) == "\u200b\n1.\n---"


def test_a_marker_before_a_delimiter_run_waits_for_what_follows_the_run():
    # "*see [9]*" loses the space before the run only if the run closes: "*see*." but
    # "*see *b" (the run opens), so nothing is shown past "*see" until the run is followed.
    for raw in ("Read *the docs [9]*.", "Read *the docs [9]*b"):
        for cut in range(len(raw) + 1):
            stream_filter = MarkerStreamFilter(1)
            shown = stream_filter.feed(raw[:cut]) + stream_filter.feed(raw[cut:])
            assert shown + stream_filter.close() == strip_out_of_range_markers(raw, 1)


def test_lines_of_dropped_markers_stream_in_work_in_proportion_to_the_answer():
    """Each "[9]" on a line of its own waits for the next line, and holding one moved the
    cut back a line at a time, looking at every marker again from the first each time."""
    import answers.citations as citations
    from tests.helpers import lines_executed

    def work(repeats: int) -> int:
        raw = "[9]\n" * repeats
        stream_filter = MarkerStreamFilter(1)

        def run() -> None:
            for start in range(0, len(raw), 7):
                stream_filter.feed(raw[start : start + 7])
            stream_filter.close()

        return lines_executed(citations, run)

    assert work(800) <= 6 * work(200)


def test_an_open_code_span_holds_the_paragraph_until_it_is_closed_or_ends():
    stream_filter = MarkerStreamFilter(2)
    assert stream_filter.feed("See `a [2] ") == "See"
    assert stream_filter.feed("b` and [1]. ") == " `a [2] b` and [1]."
    assert stream_filter.take_new_citations() == [1]  # the [2] in code cites nothing


def test_a_line_that_may_become_a_table_row_waits_for_the_next_line():
    stream_filter = MarkerStreamFilter(2)
    shown = stream_filter.feed("x `a | b [2]` |\n")
    assert shown == ""  # a delimiter row next would split the code span into cells
    shown += stream_filter.feed("|---|---|\n")
    shown += stream_filter.close()
    assert shown == strip_out_of_range_markers("x `a | b [2]` |\n|---|---|\n", 2)


def test_a_blank_line_commits_the_paragraph_before_it():
    stream_filter = MarkerStreamFilter(1)
    stream_filter.feed("One `open [1]\n\n")
    assert "".join(stream_filter._tail) == "One `open [1]\n\n"  # the paragraph may be code
    stream_filter.feed("Two [1] and more text.\n")
    # The first paragraph is settled (its backtick can no longer close): not parsed again.
    assert "".join(stream_filter._tail).startswith("Two")


def _parsed_characters(deltas: list[str], count: int, monkeypatch) -> int:  # type: ignore[no-untyped-def]
    import answers.citations as citations

    parsed = 0
    analyze = citations._analyze

    def counting(text, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal parsed
        parsed += len(text)
        return analyze(text, **kwargs)

    monkeypatch.setattr(citations, "_analyze", counting)
    stream_filter = MarkerStreamFilter(count)
    for delta in deltas:
        stream_filter.feed(delta)
    stream_filter.close()
    return parsed


def test_each_character_is_parsed_a_bounded_number_of_times(monkeypatch):
    """The stream filter's cost is linear: however an answer is split and whatever it
    holds, the parser sees each character a bounded number of times (a count, not a time)."""
    from answers.citations import _INITIAL_PARSE_BUDGET, _PARSE_BUDGET_PER_CHAR

    sentence = "Lambdas are small [1] and `x[2]` see [the docs](https://d/x). "
    cases = {
        "prose, 4-character deltas": sentence * 320,
        "one line of [x](": "[x](" * 2000,
        "one open code span": "`" + "a [1] " * 3000,
    }
    for name, raw in cases.items():
        deltas = [raw[i : i + 4] for i in range(0, len(raw), 4)]
        parsed = _parsed_characters(deltas, 2, monkeypatch)
        bound = _INITIAL_PARSE_BUDGET + (_PARSE_BUDGET_PER_CHAR + 1) * len(raw)
        assert parsed <= bound, name


def test_where_a_block_may_still_change_is_placed_once_per_block(monkeypatch):
    """A paragraph of thousands of "[" (each may still open a link) had each of them placed
    in the source, reading the block's text and its line once per "[": quadratic (a 128 KB
    line took 8 s to read, 3.5 s of it the parse). Only the first one matters."""
    import answers.citations as citations

    read = 0
    place = citations._content_to_source

    def counting(text, line_starts, token, offset, cell):  # type: ignore[no-untyped-def]
        nonlocal read
        read += len(token.content)
        return place(text, line_starts, token, offset, cell)

    monkeypatch.setattr(citations, "_content_to_source", counting)
    # Where the text may still change: the first "[" or the first unmatched backtick.
    for unit, first in [("[", 0), ("[a ", 0), ("x [a", 2)]:
        raw = unit * 2000
        read = 0
        assert citations._analyze(raw, hazards=True).hazard == first
        assert read <= 2 * len(raw), unit


def test_spaces_streamed_one_at_a_time_are_shown_once_text_follows():
    """Spaces after settled text are held until text follows them (how their cost grows
    with their number is bench section 1b's)."""
    stream_filter = MarkerStreamFilter(1)
    shown = stream_filter.feed("a")
    for _ in range(300):
        shown += stream_filter.feed(" ")
    shown += stream_filter.feed("b") + stream_filter.close()
    assert shown == "a" + " " * 300 + "b"
