from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from answers.citations import iter_markers
from answers.prompt import Prompt, PromptSource
from answers.providers.extractive import ExtractiveProvider

pytestmark = pytest.mark.django_db

SOURCES = (
    PromptSource(
        1,
        1,
        "Generators",
        ("A generator function uses the yield statement to produce values lazily.",),
    ),
    PromptSource(
        2, 2, "Cooking", ("Unrelated text about the weather and nothing of interest here at all.",)
    ),
    PromptSource(
        3, 3, "Arrays", ("Indexing a list like a[1] returns the second item of the list object.",)
    ),
)


async def _stream(prompt: Prompt) -> list[str]:
    return [delta async for delta in ExtractiveProvider().stream(prompt)]


stream = async_to_sync(_stream)


def test_extractive_answers_cite_the_sources_they_quote_and_only_those():
    deltas = stream(Prompt(question="How does a generator yield values?", sources=SOURCES))
    text = "".join(deltas)
    assert len(deltas) > 1, "streamed in small deltas"
    cited = {n for m in iter_markers(text) for n in m.numbers}
    assert 1 in cited and 2 not in cited
    assert cited <= {1, 2, 3}
    assert "yield statement" in text


def test_quoted_brackets_are_escaped_so_they_are_not_citations():
    text = "".join(stream(Prompt(question="list indexing second item", sources=SOURCES)))
    assert r"a\[1\]" in text
    assert [m.numbers for m in iter_markers(text)] == [(3,)]


def test_it_is_deterministic():
    prompt = Prompt(question="How does a generator yield values?", sources=SOURCES)
    assert stream(prompt) == stream(prompt)
