"""``answers.rerankers.HttpReranker`` against a real local ``/rerank`` server, failures included:
on any failure the sources keep the search's order, carry no rerank scores, and the stored
question says why (the admin shows it)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.urls import reverse

from answers.models import Answer, RetrievedSource
from answers.pipeline import retrieve_sources
from answers.rerankers import HttpReranker, RerankerError
from tests.helpers import ask
from tests.rerank_server import FakeReranker

pytestmark = pytest.mark.django_db

QUESTION = "How does the with statement call __enter__ and __exit__?"
SUPERUSER = User(username="rerank-test", is_active=True, is_superuser=True)


@pytest.fixture
def server(settings) -> Iterator[FakeReranker]:  # type: ignore[no-untyped-def]
    with FakeReranker() as fake:
        settings.ANSWERS = {
            **getattr(settings, "ANSWERS", {}),
            "RERANKER": "answers.rerankers.HttpReranker",
            "RERANK_URL": fake.url,
            "RERANK_MODEL": "BAAI/bge-reranker-base",
            "RERANK_API_KEY": "sk-rerank",
            "RERANK_TIMEOUT": 0.5,
        }
        yield fake


def _unreranked(settings) -> list[int]:  # type: ignore[no-untyped-def]
    saved = settings.ANSWERS
    settings.ANSWERS = {k: v for k, v in saved.items() if k != "RERANKER"}
    sources = retrieve_sources(user=SUPERUSER, question=QUESTION).sources
    settings.ANSWERS = saved
    return [s.document_id for s in sources]


def test_cohere_protocol_reorders_the_sources(server: FakeReranker, settings) -> None:  # type: ignore[no-untyped-def]
    plain = _unreranked(settings)
    retrieval = retrieve_sources(user=SUPERUSER, question=QUESTION)
    candidates, sources = retrieval.candidates, retrieval.sources
    assert len(plain) >= 2 and retrieval.rerank_error == ""
    # The fake scores later candidates higher: the search's order comes back reversed.
    assert [s.document_id for s in sources] != plain
    assert all(c.rerank_score is not None for c in candidates if not c.dropped_reason)
    request = server.requests[-1]
    assert request["query"] == QUESTION and request["model"] == "BAAI/bge-reranker-base"
    assert request["top_n"] == len(request["documents"])
    assert server.headers[-1]["Authorization"] == "Bearer sk-rerank"


def test_tei_protocol(server: FakeReranker, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ANSWERS = {**settings.ANSWERS, "RERANK_API": "tei"}
    scores = HttpReranker().rerank("q", [_C("a"), _C("b"), _C("c")])
    assert scores == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert set(server.requests[-1]) == {"query", "texts"}


class _C:
    def __init__(self, text: str) -> None:
        self.text, self.title = text, "t"


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("status", "HTTP 500"),
        ("malformed", "malformed JSON"),
        ("short", "scored 2 of 3"),
        ("slow", "unreachable"),
        ("nan", "bad index or score"),
        ("drip", "took longer than 0.5 s"),
    ],
)
def test_failures_raise_a_reason(server: FakeReranker, behaviour: str, reason: str) -> None:
    server.behaviour = behaviour
    with pytest.raises(RerankerError, match=reason):
        HttpReranker().rerank("q", [_C("a"), _C("b"), _C("c")])


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("status", "RerankerError: reranker returned HTTP 500"),
        ("malformed", "RerankerError: reranker returned malformed JSON"),
        ("short", "RerankerError: reranker scored "),
        ("slow", "RerankerError: reranker unreachable"),
    ],
)
def test_a_failing_reranker_keeps_the_search_order_and_says_why(
    server: FakeReranker, settings, behaviour: str, reason: str
) -> None:  # type: ignore[no-untyped-def]
    plain = _unreranked(settings)
    server.behaviour = behaviour
    retrieval = retrieve_sources(user=SUPERUSER, question=QUESTION)
    assert [s.document_id for s in retrieval.sources] == plain
    assert all(c.rerank_score is None for c in retrieval.candidates)
    assert retrieval.rerank_error.startswith(reason)


def test_unreachable_server_keeps_the_search_order(settings) -> None:  # type: ignore[no-untyped-def]
    with FakeReranker() as fake:
        url = fake.url  # closed when the block ends: nothing listens there any more
    settings.ANSWERS = {
        **getattr(settings, "ANSWERS", {}),
        "RERANKER": "answers.rerankers.HttpReranker",
        "RERANK_URL": url,
    }
    with pytest.raises(RerankerError, match="unreachable"):
        HttpReranker().rerank("q", [_C("a")])
    retrieval = retrieve_sources(user=SUPERUSER, question=QUESTION)
    assert retrieval.sources and "unreachable" in retrieval.rerank_error


def test_check_reports_a_missing_url(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ANSWERS = {"RERANKER": "answers.rerankers.HttpReranker", "RERANK_API": "x"}
    ids = {m.id for m in run_checks()}
    assert {"answers.E020", "answers.E021"} <= ids


def test_a_stored_answer_says_why_its_reranker_was_not_used(
    server: FakeReranker, asker: User, admin_client: Any
) -> None:
    server.behaviour = "status"
    done = ask(user=asker, question=QUESTION)
    question = Answer.objects.get(pk=done.answer.answer_id).question
    assert question.rerank_error == "RerankerError: reranker returned HTTP 500"
    page = admin_client.get(reverse("admin:answers_answer_change", args=[done.answer.answer_id]))
    assert "failed, search order kept: RerankerError: reranker returned HTTP 500" in (
        page.content.decode()
    )


# Where the reranker's wait happens (ADR 0017, "Later"): a live daphne on SQLite, whose
# reranker is this test's server, and real WebSocket clients.

NOTHING_FOUND = "zzqxv wibblefrotz quuxplonk"


async def _until(condition: Any, *, within: float = 15.0) -> bool:
    """Whether ``condition`` came true within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.mark.django_db(transaction=True)
async def test_slow_reranks_do_not_hold_up_other_users_answers(
    corpus, asker, other_asker, member
) -> None:  # type: ignore[no-untyped-def]
    """Two users' reranks held open by the reranker: a third user's answer, whose question
    finds nothing to rerank, still comes; the two answers then come reranked."""
    from django.db import connections

    from tests.live import run_live_server
    from tests.sockets import live_receive_until_final, live_socket, session_cookie

    cookies = [await sync_to_async(session_cookie)(u) for u in (asker, other_asker, member)]
    with FakeReranker() as fake:
        fake.behaviour, fake.delay = "hold", 20.0  # held until released, 20 s at most
        env = {"DJANGO_SETTINGS_MODULE": "tests.settings_reranked", "TEST_RERANK_URL": fake.url}
        with run_live_server(connections["default"].settings_dict, env=env) as live:
            first, second, third = [await live_socket(live, cookie) for cookie in cookies]
            await first.send(json.dumps({"type": "ask", "question": QUESTION}))
            assert await _until(lambda: fake.holding == 1)
            # Another user's rerank reaches the reranker while the first is still open.
            await second.send(json.dumps({"type": "ask", "question": QUESTION}))
            both_held = await _until(lambda: fake.holding == 2)
            asked = time.monotonic()
            await third.send(json.dumps({"type": "ask", "question": NOTHING_FOUND}))
            unreranked = await live_receive_until_final(third, timeout=30)
            held_meanwhile = fake.holding
            print(f"third user's answer after {time.monotonic() - asked:.3f} s")
            fake.release.set()
            reranked = [await live_receive_until_final(s, timeout=30) for s in (first, second)]
            for socket in (first, second, third):
                await socket.close()

    assert both_held, "the second user's rerank waited for the first user's"
    assert unreranked[-1]["type"] == "done" and unreranked[-1]["status"] == "no_answer"
    # Its answer came while both reranks were still open at the reranker.
    assert held_meanwhile == 2
    for messages in reranked:
        assert messages[-1]["type"] == "done" and messages[-1]["status"] == "complete"
        answer = await Answer.objects.select_related("question").aget(pk=messages[-1]["answer_id"])
        assert answer.question.rerank_error == ""
        assert await RetrievedSource.objects.filter(
            question=answer.question, rerank_score__isnull=False
        ).aexists()
