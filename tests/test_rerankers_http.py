"""``answers.rerankers.HttpReranker`` against a real local ``/rerank`` server, failures included:
on any failure the sources keep the search's order and carry no rerank scores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks

from answers.pipeline import retrieve_sources
from answers.rerankers import HttpReranker, RerankerError
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
    _, sources = retrieve_sources(user=SUPERUSER, question=QUESTION)
    settings.ANSWERS = saved
    return [s.document_id for s in sources]


def test_cohere_protocol_reorders_the_sources(server: FakeReranker, settings) -> None:  # type: ignore[no-untyped-def]
    plain = _unreranked(settings)
    candidates, sources = retrieve_sources(user=SUPERUSER, question=QUESTION)
    assert len(plain) >= 2
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
    ],
)
def test_failures_raise_a_reason(server: FakeReranker, behaviour: str, reason: str) -> None:
    server.behaviour = behaviour
    with pytest.raises(RerankerError, match=reason):
        HttpReranker().rerank("q", [_C("a"), _C("b"), _C("c")])


@pytest.mark.parametrize("behaviour", ["status", "malformed", "short", "slow"])
def test_a_failing_reranker_keeps_the_search_order(
    server: FakeReranker, settings, behaviour: str
) -> None:  # type: ignore[no-untyped-def]
    plain = _unreranked(settings)
    server.behaviour = behaviour
    candidates, sources = retrieve_sources(user=SUPERUSER, question=QUESTION)
    assert [s.document_id for s in sources] == plain
    assert all(c.rerank_score is None for c in candidates)


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
    _, sources = retrieve_sources(user=SUPERUSER, question=QUESTION)
    assert sources


def test_check_reports_a_missing_url(settings) -> None:  # type: ignore[no-untyped-def]
    settings.ANSWERS = {"RERANKER": "answers.rerankers.HttpReranker", "RERANK_API": "x"}
    ids = {m.id for m in run_checks()}
    assert {"answers.E020", "answers.E021"} <= ids
