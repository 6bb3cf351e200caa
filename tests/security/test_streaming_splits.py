"""Streaming: however a provider splits its answer into deltas, the user sees the same thing.

The stream filter holds back anything that might be the start of a citation marker, so an
out-of-range marker (a citation of a source the user was never given) cannot slip through
split across deltas, and the finalized answer never depends on where the splits fell.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from answers import pipeline
from answers.citations import iter_markers

QUESTION = "What is a lambda expression?"
PIECES = [
    "Lambdas are small anonymous functions",
    " ",
    ". ",
    "[1]",
    "[2]",
    "[9]",
    "[1, 2]",
    "[2,9]",
    "[",
    "]",
    "1",
    "9",
    ",",
    "`[9] in code`",
    "`x`",
    "```\n[9]\n```\n",
    "[a link](https://example.com/a)",
    "[9](https://example.com/nine)",
    "\n\n",
    "- item ",
]


@dataclass(frozen=True)
class Seen:
    tokens: str
    citations: tuple[tuple[int, int], ...]
    status: str
    text: str
    references: tuple[tuple[int, int, str], ...]
    number_map: tuple[tuple[int, int], ...]


def _run(user: object, deltas: list[str]) -> Seen:
    from tests.providers import ScriptedProvider

    ScriptedProvider.script = deltas

    async def run() -> list[pipeline.Event]:
        answer_run = await pipeline.start_answer(user=user, question=QUESTION)  # type: ignore[arg-type]
        return [event async for event in answer_run.events()]

    events = async_to_sync(run)()
    done = events[-1]
    assert isinstance(done, pipeline.DoneEvent), done
    return Seen(
        tokens="".join(e.text for e in events if isinstance(e, pipeline.TokenEvent)),
        citations=tuple(
            (e.number, e.document_id) for e in events if isinstance(e, pipeline.CitationEvent)
        ),
        status=done.answer.status,
        text=done.answer.text,
        references=tuple((r.index, r.document_id, r.url) for r in done.answer.references),
        number_map=tuple(sorted(done.number_map.items())),
    )


@st.composite
def split_answers(draw: st.DrawFn) -> tuple[str, list[str]]:
    raw = "".join(draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12)))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(raw) - 1, 1)), max_size=12)))
    bounds = [0, *[c for c in cuts if 0 < c < len(raw)], len(raw)]
    return raw, [raw[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.django_db
@hypothesis_settings(
    deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=split_answers())
def test_any_split_of_an_answer_streams_and_finalizes_the_same(
    case, asker, scripted, quiet_questions
):
    raw, deltas = case
    assert "".join(deltas) == raw
    whole = _run(asker, [raw])
    split = _run(asker, deltas)
    assert split == whole
    # And what streamed never cites a source the prompt did not number.
    sources = len(scripted.prompts[-1].sources)
    assert sources >= 2
    assert all(1 <= n <= sources for m in iter_markers(split.tokens) for n in m.numbers)
