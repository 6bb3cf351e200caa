"""The content-gap report (answers.gaps, ADR 0024): badly answered questions grouped, in the
admin (page and CSV) and the command, never showing a reviewer what they may not view."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from answers import services
from answers.gaps import GapQuestion, gap_groups, gap_rows
from answers.models import Answer
from tests.helpers import ask, staff_reviewer

MONDAY = datetime(2026, 11, 30, 9, tzinfo=UTC)
UNANSWERABLE = [
    "How do I book a meeting room?",
    "Where can I book meeting rooms for a team?",
    "Can I reserve a meeting room for Friday?",
    "What is the parking policy for visitors?",
    "Is there visitor parking at the office?",
]
VAULT_QUESTION = "Where does the Nightjar zeppelin launch from?"
VAULT_TITLE = "Project Nightjar launch plan"


def gap(pk: int, text: str, *, days: int = 0, reasons: tuple[str, ...] = ("no_answer",)):  # type: ignore[no-untyped-def]
    return GapQuestion(pk, pk, text, MONDAY + timedelta(days=days), reasons)


def test_similar_questions_are_grouped_and_unrelated_ones_are_not() -> None:
    questions = [gap(i, text, days=i * 4) for i, text in enumerate(UNANSWERABLE)]
    groups = gap_groups(questions)
    assert [sorted(q.text for q in g.questions) for g in groups] == [
        sorted(UNANSWERABLE[:3]),
        sorted(UNANSWERABLE[3:]),
    ]
    rooms = groups[0]
    assert set(rooms.label.split()) >= {"meet", "room"}
    # Three questions over two weeks (30 Nov and 4 Dec, then 8 Dec).
    assert sorted(rooms.weeks().values()) == [1, 2]
    assert rooms.examples(2)[0].text == UNANSWERABLE[2]  # newest first


def test_grouping_is_bounded_to_the_newest_questions() -> None:
    questions = [gap(i, f"question number {i} about topic{i}", days=i) for i in range(50)]
    groups = gap_groups(questions, limit=10)
    assert sum(len(g.questions) for g in groups) == 10
    assert min(q.question_id for g in groups for q in g.questions) == 40


def test_csv_cells_cannot_be_formulas() -> None:
    rows = gap_rows(gap_groups([gap(1, '=HYPERLINK("http://evil.example","x")'), gap(2, "+1")]))
    cells = [cell for row in rows[1:] for cell in row]
    assert not any(cell[:1] in "=+-@" for cell in cells if cell)


@pytest.fixture
def gaps_asked(settings: Any, asker: Any, member: Any) -> dict[str, Any]:
    """The unanswerable questions asked through the real pipeline, one answered question
    voted down, and a vault member's question whose vault documents stayed under the
    threshold (so they are its nearest documents)."""
    for text in UNANSWERABLE:
        done = ask(user=asker, question=text)
        assert done.answer.status == "no_answer", text
    answered = ask(user=asker, question="What is a lambda expression?")
    answer = Answer.objects.get(pk=answered.answer.answer_id)
    services.feedback_record(answer=answer, user=asker, rating="down", comment="")
    settings.ANSWERS = {**settings.ANSWERS, "SCORE_THRESHOLD": 0.99}
    vault = ask(user=member, question=VAULT_QUESTION)
    assert vault.answer.status == "no_answer"
    settings.ANSWERS = {k: v for k, v in settings.ANSWERS.items() if k != "SCORE_THRESHOLD"}
    return {"down": answer}


def report(client: Client, user: Any, **params: str) -> Any:
    client.force_login(user)
    return client.get(reverse("admin:answers_content_gaps"), params)


@pytest.mark.django_db
def test_the_admin_page_groups_the_gaps_and_links_them(
    client: Client, gaps_asked: dict[str, Any]
) -> None:
    auditor = staff_reviewer("auditor", review_all=True)
    page = report(client, auditor)
    assert page.status_code == 200
    html = page.content.decode()
    assert "7 questions that got no answer, were voted down" in html
    rooms = page.context["groups"][0]
    assert rooms["count"] == 3 and rooms["reasons"] == [("no answer", 3)]
    assert "What is a lambda expression?" in html and "voted down: 1" in html
    assert reverse("admin:answers_answer_change", args=[gaps_asked["down"].pk]) in html
    assert VAULT_TITLE in html  # the vault question's nearest document, for a review-all auditor
    changelist = client.get(reverse("admin:answers_answer_changelist")).content.decode()
    assert reverse("admin:answers_content_gaps") in changelist


@pytest.mark.django_db
def test_a_reviewer_never_sees_documents_they_may_not_view(
    client: Client, gaps_asked: dict[str, Any]
) -> None:
    outsider = staff_reviewer("outsider")
    html = report(client, outsider).content.decode()
    assert VAULT_QUESTION in html  # it got no answer: no source was shown to anyone
    assert VAULT_TITLE not in html and "Nightjar zeppelin hangar safety" not in html
    csv_text = report(client, outsider, format="csv").content.decode()
    assert VAULT_TITLE not in csv_text
    insider = staff_reviewer("insider", groups=("vault",))
    assert VAULT_TITLE in report(client, insider).content.decode()
    nobody = staff_reviewer("nobody")
    nobody.user_permissions.clear()
    assert report(client, nobody).status_code == 403


@pytest.mark.django_db
def test_csv_export_and_the_command_give_the_same_groups(
    client: Client, gaps_asked: dict[str, Any]
) -> None:
    auditor = staff_reviewer("auditor", review_all=True)
    response = report(client, auditor, format="csv", days="7")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert 'filename="content-gaps-7d.csv"' in response["Content-Disposition"]
    exported = list(csv.reader(io.StringIO(response.content.decode())))
    assert exported[0][:3] == ["group", "questions", "no answer"]
    out = io.StringIO()
    call_command("content_gaps", "--csv", "--days", "7", stdout=out)
    assert list(csv.reader(io.StringIO(out.getvalue()))) == exported
    out = io.StringIO()
    call_command("content_gaps", stdout=out)
    assert "7 gap question(s) in the last 30 days" in out.getvalue()


@pytest.mark.django_db
def test_the_command_refuses_bad_input() -> None:
    with pytest.raises(CommandError, match="--days must be between 1 and 366"):
        call_command("content_gaps", "--days", "0")
    with pytest.raises(CommandError, match="No user 'nobody'"):
        call_command("content_gaps", "--user", "nobody")
    # Not everything, as a reviewer holding review_all_answers sees it.
    with pytest.raises(CommandError, match="--user needs a name"):
        call_command("content_gaps", "--user", "")
