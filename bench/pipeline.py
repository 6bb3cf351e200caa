"""3. Database queries per answer, and 4. time from request to the ``references`` event."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from answers import pipeline, selectors
from answers.retrieval import search_hits
from tests.providers import ScriptedProvider

from .questions import BROAD_QUESTION, LATENCY_QUESTIONS
from .report import Row, median, p95

QUERIES_SECTION = "3. database queries per answer"
LATENCY_SECTION = "4. request -> references event"
SOURCE_COUNTS = (1, 8, 32)
PROVIDER = "tests.providers.ScriptedProvider"
# The per-user abuse limits would refuse a benchmark's many questions.
NO_LIMITS = {"QUESTIONS_PER_MINUTE": 1_000_000, "MAX_CONCURRENT_STREAMS": 1_000_000}


def asker(username: str = "bench-asker") -> User:
    """A plain user with the ask permission (not a superuser: access checks run in full)."""
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.user_permissions.add(Permission.objects.get(codename="ask_question"))
    return user


def _answers(**overrides: Any) -> dict[str, Any]:
    return {"PROVIDER": PROVIDER, **NO_LIMITS, **overrides}


def queries_per_answer() -> list[Row]:
    counts: dict[int, int] = {}
    found: dict[int, int] = {}
    # A process that has asked before: the question's stems are remembered (SQLite FTS5
    # tokenizes a term once per process), as in any server after its first questions.
    with override_settings(ANSWERS=_answers()):
        ScriptedProvider.script = ["Warm [1]."]
        async_to_sync(pipeline.answer_question)(user=asker(), question=BROAD_QUESTION)
    for n in SOURCE_COUNTS:
        settings = _answers(MAX_SOURCES=n, SCORE_THRESHOLD=0, CANDIDATES=100)
        with override_settings(ANSWERS=settings):
            ScriptedProvider.script = [
                "The answer",
                *(f" cites [{i}]" for i in range(1, n + 1)),
                ".",
            ]
            user = User.objects.get(pk=asker().pk)  # fresh: no permission cache
            with CaptureQueriesContext(connection) as captured:
                done = async_to_sync(pipeline.answer_question)(user=user, question=BROAD_QUESTION)
            counts[n] = len(captured.captured_queries)
            found[n] = len(done.answer.references) if isinstance(done, pipeline.DoneEvent) else 0
    rows = []
    for n in SOURCE_COUNTS:
        note = "" if found[n] == n else f"only {found[n]} source(s) cited; the question found fewer"
        rows.append(
            Row(QUERIES_SECTION, f"queries per answer, {n} source(s) cited", counts[n],
                counts[1], "", "1 source", ("==", 1.0), note=note)
        )  # fmt: skip
    return rows


HISTORY_SIZES = (1_000, 100_000)


def limits_growth() -> list[Row]:
    """The per-user limits check (``services.question_check_limits``, at every ask, twice)
    for an asker with 1,000 questions and with 100,000 (none in the last minute): it must
    not grow with the asker's history (migration 0017's ``(user, created_at)`` index)."""
    from datetime import timedelta

    from django.utils import timezone

    from answers import services
    from answers.models import Conversation, Question

    user, _ = User.objects.get_or_create(username="bench-history")
    Conversation.objects.filter(owner=user).delete()  # and their questions
    timings: dict[int, float] = {}
    held = 0
    for size in HISTORY_SIZES:
        conversation = Conversation.objects.create(owner=user)
        Question.objects.bulk_create(
            (
                Question(conversation=conversation, turn=turn, text="q", user=user)
                for turn in range(size - held)
            ),
            batch_size=5_000,
        )
        held = size
        earlier = timezone.now() - timedelta(days=3)
        Question.objects.filter(conversation=conversation).update(created_at=earlier)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        runs = []
        for _ in range(50):
            start = time.perf_counter()
            services.question_check_limits(user=user)
            runs.append(time.perf_counter() - start)
        timings[size] = median(runs)
    Conversation.objects.filter(owner=user).delete()  # and their questions
    small, large = HISTORY_SIZES
    return [
        Row(QUERIES_SECTION, f"per-user limits check, asker with {large:,} questions",
            timings[large], timings[small], "s", f"asker with {small:,}", ("<=", 1.5),
            note="median of 50; the count reads the last minute's questions only"),
    ]  # fmt: skip


async def _time_to_references(user: User, question: str) -> float:
    start = time.perf_counter()
    run = await pipeline.start_answer(user=user, question=question)
    events = run.events()
    first = await anext(events)
    elapsed = time.perf_counter() - start
    assert first.type == "references"
    async for _ in events:  # finish it, so it is not left streaming
        pass
    return elapsed


def _retrieval(user: User, question: str) -> float:
    start = time.perf_counter()
    documents = selectors.document_list_visible(user=user)  # the asker's scope (ADR 0009)
    hits = search_hits(question=question, previous_question=None, documents=documents)
    selectors.candidates_for_hits(hits=((h.chunk_id, h.score) for h in hits))
    return time.perf_counter() - start


def time_to_references() -> list[Row]:
    with override_settings(ANSWERS=_answers()):
        ScriptedProvider.script = ["Short answer [1]."]
        user = asker()
        measure = async_to_sync(_time_to_references)
        for question in LATENCY_QUESTIONS[:3]:  # warm-up: imports, caches, temp tables
            measure(user, question)
            _retrieval(user, question)
        app, alone = [], []
        for question in LATENCY_QUESTIONS:
            alone.append(_retrieval(user, question))
            app.append(measure(user, question))
    overhead = median(app) - median(alone)
    target = (median(alone) + 0.010) / median(alone)
    return [
        Row(LATENCY_SECTION, "time to references event, median", median(app), median(alone),
            "s", "retrieval alone", ("<=", round(target, 2)),
            note=f"target = retrieval + 10 ms; median overhead {overhead * 1000:.1f} ms over "
            f"{len(app)} questions"),
        Row(LATENCY_SECTION, "time to references event, p95", p95(app), p95(alone), "s",
            "retrieval alone", None),
    ]  # fmt: skip
