"""Follow-up rewrite (``REWRITE_FOLLOWUPS``) against a real local Chat Completions server:
the rewrite is searched, the answer keeps the asker's words, and every failure falls back
to searching the follow-up with the turn before, with the reason kept for the admin."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import run_checks
from django.urls import reverse

from answers.models import Answer, Question
from answers.prompt import REWRITE_PROMPT
from tests.helpers import ask
from tests.llm_server import FakeLLM, serving

pytestmark = pytest.mark.django_db

FIRST = "What does the yield statement do?"
FOLLOW_UP = "Can it be used outside a function?"
# Names another topic than the turn before, so the sources show which text was searched.
REWRITTEN = "How does the with statement call __enter__ and __exit__?"
ANSWER = {"kind": "ok", "deltas": ["It makes a generator [1]."]}


@pytest.fixture
def llm(settings: Any) -> Iterator[FakeLLM]:
    with serving(settings, REWRITE_FOLLOWUPS=True, REWRITE_TIMEOUT=2.0) as server:
        yield server


def converse(user: Any, llm: FakeLLM, rewrite: dict[str, Any]) -> tuple[Question, Any]:
    """Two turns; the follow-up's rewrite request gets ``rewrite``."""
    llm.behaviours = [ANSWER, rewrite, ANSWER]
    first = ask(user=user, question=FIRST)
    done = ask(user=user, question=FOLLOW_UP, conversation_id=first.answer.conversation_id)
    return Answer.objects.get(pk=done.answer.answer_id).question, done


def test_the_rewrite_is_searched_and_the_answer_keeps_the_askers_words(
    corpus: None, asker: Any, llm: FakeLLM
) -> None:
    question, done = converse(asker, llm, {"kind": "ok", "deltas": [f"  {REWRITTEN}\n"]})
    assert len(llm.requests) == 3  # answer, rewrite, answer: the first turn has none
    rewrite_request = llm.requests[1]["messages"]
    assert rewrite_request[0] == {"role": "system", "content": REWRITE_PROMPT}
    conversation = rewrite_request[1]["content"]
    assert FIRST in conversation and "It makes a generator" in conversation
    assert conversation.endswith(f"Last question: {FOLLOW_UP}")
    assert question.search_text == REWRITTEN  # whitespace folded
    assert question.rewrite_ms is not None and question.rewrite_error == ""
    assert "with" in done.answer.references[0].title.lower()  # the rewrite's topic
    assert llm.requests[2]["messages"][-1]["content"].endswith(f"Question: {FOLLOW_UP}")


@pytest.mark.parametrize(
    ("rewrite", "reason"),
    [
        ({"kind": "status", "status": 500}, "ProviderError: InternalServerError: HTTP 500"),
        ({"kind": "ok", "deltas": ["  ", "\n"]}, "ProviderError: the rewrite was empty"),
        ({"kind": "stall_first", "seconds": 5, "deltas": [REWRITTEN]}, "timed out after 0.3 s"),
        ({"kind": "cut", "after": 1, "deltas": ["How", " does"]}, "ProviderError"),
    ],
)
def test_a_failed_rewrite_searches_the_follow_up_with_the_turn_before(
    corpus: None, asker: Any, llm: FakeLLM, settings: Any, rewrite: dict[str, Any], reason: str
) -> None:
    settings.ANSWERS = {**settings.ANSWERS, "REWRITE_TIMEOUT": 0.3}
    question, done = converse(asker, llm, rewrite)
    assert done.answer.status == "complete"
    assert question.search_text == "" and question.rewrite_error.startswith(reason)
    assert question.rewrite_ms is not None
    assert "yield" in done.answer.references[0].title.lower()  # the turn before's subject


def test_off_by_default_no_rewrite_is_requested(
    corpus: None, asker: Any, llm: FakeLLM, settings: Any
) -> None:
    settings.ANSWERS = {k: v for k, v in settings.ANSWERS.items() if k != "REWRITE_FOLLOWUPS"}
    llm.behaviours = [ANSWER]
    first = ask(user=asker, question=FIRST)
    done = ask(user=asker, question=FOLLOW_UP, conversation_id=first.answer.conversation_id)
    assert len(llm.requests) == 2
    question = Answer.objects.get(pk=done.answer.answer_id).question
    assert (question.search_text, question.rewrite_ms, question.rewrite_error) == ("", None, "")


def test_a_provider_that_cannot_rewrite_is_warned_about_and_asks_still_work(
    corpus: None, asker: Any, settings: Any
) -> None:
    settings.ANSWERS = {**settings.ANSWERS, "REWRITE_FOLLOWUPS": True}
    assert "answers.W002" in {m.id for m in run_checks()}
    first = ask(user=asker, question=FIRST)
    done = ask(user=asker, question=FOLLOW_UP, conversation_id=first.answer.conversation_id)
    assert Answer.objects.get(pk=done.answer.answer_id).question.rewrite_ms is None
    settings.ANSWERS = {**settings.ANSWERS, "REWRITE_FOLLOWUPS": "yes"}
    assert "answers.E003" in {m.id for m in run_checks()}


def test_the_admin_shows_what_was_searched_and_why_a_rewrite_was_not_used(
    corpus: None, asker: Any, llm: FakeLLM, admin_client: Any
) -> None:
    used, _ = converse(asker, llm, {"kind": "ok", "deltas": [REWRITTEN]})
    page = admin_client.get(reverse("admin:answers_answer_change", args=[used.answer.pk]))
    assert f"{REWRITTEN} (the follow-up rewritten to stand alone)" in page.content.decode()
    assert f"used ({used.rewrite_ms} ms)" in page.content.decode()
    failed, _ = converse(asker, llm, {"kind": "status", "status": 500})
    page = admin_client.get(reverse("admin:answers_answer_change", args=[failed.answer.pk]))
    html = page.content.decode()
    assert "the question together with the one before it" in html
    assert "not used: ProviderError: InternalServerError: HTTP 500" in html
