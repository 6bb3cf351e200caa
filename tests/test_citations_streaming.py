from __future__ import annotations

import itertools

from hypothesis import given, settings
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
    assert stream_filter.take_new_citations(emitted) == [2, 1]
    emitted += stream_filter.feed("[3] e")
    assert stream_filter.take_new_citations(emitted) == [3]
    assert cited_numbers(emitted) == [2, 1, 3]
