"""What the presenters make of a passage for the Sources cards: the excerpt, its first
words, where it is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from answers.presenters import SNIPPET_CHARS, excerpt_of, location_of, snippet_of

PASSAGE = (
    '# Lambdas\n\n```\nlambda_expr ::= "lambda" [parameter_list] ":" expression\n```\n\n'
    "Lambda expressions (sometimes called *lambda forms*)\nare used with `lambda`.\n"
)


def test_a_snippet_is_the_prose_not_the_heading_or_the_code():
    assert snippet_of(PASSAGE) == (
        "Lambda expressions (sometimes called lambda forms) are used with lambda."
    )


def test_a_passage_with_no_prose_still_has_a_snippet():
    assert snippet_of("```\nx = 1\n```\n") != ""


@given(st.text(max_size=2000))
def test_a_snippet_is_one_short_line(text):
    snippet = snippet_of(text)
    assert "\n" not in snippet and len(snippet) <= SNIPPET_CHARS + 2


def test_an_excerpt_keeps_its_blocks_and_drops_layout_rules(settings):
    settings.ANSWERS = {**settings.ANSWERS, "EXCERPT_CHARS": 10_000}
    excerpt = excerpt_of(["Title\n=====\n\n```\ncode  line\n```\n\n\n\nText."])
    assert excerpt == "Title\n\n```\ncode  line\n```\n\nText."  # the fence stays whole


def test_where_a_source_is():
    assert location_of("https://docs.python.org/3/x.html#y") == "docs.python.org"
    assert location_of("/documents/3/#chunk-1") == "In the corpus"
