"""Retrieval on threads of its own (``RETRIEVAL_THREADS``) where the database serves
concurrent readers: PostgreSQL. Transactional: those threads have their own connections."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection

from answers import pipeline

pytestmark = pytest.mark.django_db(transaction=True)

QUESTIONS = [
    "What is a lambda expression?",
    "What does the global statement do?",
    "How do generators work?",
    "What does pass do?",
]


@pytest.fixture
def recorded_threads(monkeypatch):  # type: ignore[no-untyped-def]
    names: list[str] = []
    search = pipeline.retrieve_sources

    def recording(**kwargs):  # type: ignore[no-untyped-def]
        names.append(threading.current_thread().name)
        return search(**kwargs)

    monkeypatch.setattr(pipeline, "retrieve_sources", recording)
    return names


async def test_concurrent_questions_search_at_once_on_their_own_threads(
    corpus, asker, settings, recorded_threads
):
    settings.ANSWERS = {**settings.ANSWERS, "RETRIEVAL_THREADS": 2, "MAX_CONCURRENT_STREAMS": 10}
    answers = await asyncio.gather(
        *(pipeline.answer_question(user=asker, question=q) for q in QUESTIONS)
    )
    # The same answers as on the shared thread, whatever thread searched.
    settings.ANSWERS = {**settings.ANSWERS, "RETRIEVAL_THREADS": 0}
    again = [await pipeline.answer_question(user=asker, question=q) for q in QUESTIONS]
    for threaded, shared in zip(answers, again, strict=True):
        assert isinstance(threaded, pipeline.DoneEvent) and isinstance(shared, pipeline.DoneEvent)
        assert threaded.answer.status == "complete"
        titles = [r.title for r in threaded.answer.references]
        assert titles == [r.title for r in shared.answer.references]
    searched_on = set(recorded_threads[: len(QUESTIONS)])
    if connection.vendor == "postgresql":
        assert all(name.startswith("answers-retrieval") for name in searched_on), searched_on
    else:  # SQLite: always the one database thread
        assert not any(name.startswith("answers-retrieval") for name in recorded_threads)


def test_a_streaming_answer_holds_no_database_connection(corpus, asker, scripted):
    """Between storing the question and storing the answer, an answer waits on the
    provider for seconds: the thread that stored it gives its connection back (to the
    pool on PostgreSQL), or every JSON or SSE ask in flight would hold one."""
    from tests.helpers import start
    from tests.test_pipeline import collect

    scripted.script = ["The try statement [1]."]
    run = start(user=asker, question="How does the try statement handle exceptions?")
    assert connection.connection is None  # this thread ran the storing (thread-sensitive)
    events = collect(run)
    assert events[-1].answer.status == "complete"


def test_a_follower_holds_no_database_connection(corpus, asker, scripted):
    """A follower (an SSE resume, a second tab) waits on events, not rows: once it has
    been checked, its thread's connection goes back."""
    from contextlib import aclosing

    from asgiref.sync import async_to_sync, sync_to_async

    from answers import streams
    from tests.helpers import ask

    scripted.script = ["The try statement [1]."]
    done = ask(user=asker, question="How does the try statement handle exceptions?")

    async def first_event_then_look():  # type: ignore[no-untyped-def]
        events = streams.answer_stream_follow(answer_id=done.answer.answer_id, user=asker)
        async with aclosing(events):
            first = await anext(events)
            # The same (thread-sensitive) thread the follower's check ran on.
            released = await sync_to_async(lambda: connection.connection is None)()
        return first, released

    first, released = async_to_sync(first_event_then_look)()
    assert first.event.type in {"references", "done"}  # from the log, or the stored result
    assert released
