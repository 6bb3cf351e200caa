"""Citation support (answers.support, ADR 0023): the rule on its own, then over the real
pipeline (a model's fabricated sentence scores low and the admin shows it)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from answers.models import Answer
from answers.support import SUPPORTED, citations_support, claim_support, claims_supported
from tests.corpus import ingest_text
from tests.helpers import ask
from tests.llm_server import FakeLLM, serving

PASSAGE = (
    "The zorblat flange is calibrated with a brass wrenchlet every spring. "
    "Calibrating it takes 60 minutes and must not be done in the rain."
)


def support(claim: str, passage: str = PASSAGE) -> float:
    (citation,) = citations_support(f"{claim} [1].", {1: [passage]})
    assert citation.claim == claim
    return citation.support


def test_a_sentence_the_passage_says_is_supported_and_a_fabricated_one_is_not() -> None:
    assert support("The zorblat flange is calibrated with a brass wrenchlet") == 1.0
    assert support("Calibrating takes 60 minutes") == 1.0
    assert support("Zorblat flanges are made of cheese and painted blue") < SUPPORTED


def test_numbers_and_negations_weigh_double() -> None:
    original = support("Calibrating it must not be done in the rain")
    assert original == 1.0
    # "not" dropped (weight 2) costs more than an ordinary word would.
    assert support("Calibrating it must never be done in rain") < support(
        "Calibrating it must not be done in drizzle"
    )
    # calibr, take, minut found (3) of 3 + "90" at double weight (5)
    assert support("Calibrating takes 90 minutes") == pytest.approx(3 / 5)


def test_each_marker_cites_the_claim_before_it() -> None:
    text = "First claim about flanges [1]. Second claim, wrenchlet. [2] Third [1][2]."
    found = [(c.sentence, c.claim, c.number) for c in citations_support(text, {})]
    assert found == [
        (0, "First claim about flanges", 1),
        (1, "Second claim, wrenchlet", 2),
        (2, "Third", 1),
        (2, "Third", 2),
    ]
    assert all(c.support == 0.0 for c in citations_support(text, {}))  # no passages: unsupported


def test_markers_in_code_are_not_citations() -> None:
    text = "Index with `items[1]` to get the second one.\n\n```\nx = a[2]\n```\n"
    assert citations_support(text, {1: [PASSAGE], 2: [PASSAGE]}) == []


def test_a_claim_without_content_words_is_supported() -> None:
    assert claim_support("This is how it works", frozenset()) == 1.0  # stop words only


words = st.sampled_from(
    ["flange", "zorblat", "wrenchlet", "brass", "spring", "rain", "cheese", "blue", "60", "not"]
)


@given(st.lists(words, min_size=1, max_size=8), st.lists(words, max_size=8))
def test_support_is_a_share_and_more_passage_never_lowers_it(claim: list[str], extra: list[str]):
    text = " ".join(claim)
    base = claim_support(text, frozenset(extra[:3]))
    more = claim_support(text, frozenset(extra))
    assert 0.0 <= base <= more <= 1.0


def test_recall_reads_the_union_of_the_cited_passages() -> None:
    text = "Calibrated with a brass wrenchlet in 60 minutes [1][2]."
    passages = {1: ["calibrated with a brass wrenchlet"], 2: ["it takes 60 minutes"]}
    assert claims_supported(text, passages) == [1.0]
    assert all(c.support < 1.0 for c in citations_support(text, passages))


@pytest.fixture
def fabricating_llm(settings: Any) -> Any:
    with serving(settings) as server:
        yield server


@pytest.mark.django_db
def test_a_fabricated_sentence_is_scored_low_stored_and_shown_to_reviewers(
    asker: Any, fabricating_llm: FakeLLM, admin_client: Client
) -> None:
    ingest_text("support:zorblat", "Zorblat flange calibration", PASSAGE)
    supported = "The zorblat flange is calibrated with a brass wrenchlet [1]. "
    fabricated = "Zorblat flanges are forged from moon cheese on Tuesdays [1]."
    fabricating_llm.behaviours = [
        {"kind": "ok", "deltas": [supported, fabricated]},
        {"kind": "ok", "deltas": [supported]},
    ]
    question = "How is the zorblat flange calibrated?"
    answer = Answer.objects.get(pk=ask(user=asker, question=question).answer.answer_id)
    honest = Answer.objects.get(pk=ask(user=asker, question=question).answer.answer_id)
    supports = [c.support for c in answer.citations.order_by("sentence")]
    assert supports[0] == 1.0 and supports[1] < SUPPORTED
    assert answer.support_min == supports[1] and honest.support_min == 1.0
    assert answer.support_mean == pytest.approx(sum(supports) / 2, abs=1e-4)

    changelist = reverse("admin:answers_answer_changelist")
    weak = list(admin_client.get(changelist, {"support": "weak"}).context["cl"].result_list)
    strong = list(admin_client.get(changelist, {"support": "strong"}).context["cl"].result_list)
    assert weak == [answer] and strong == [honest]
    # The "Support (weakest)" column (7th), ascending: weakest first.
    ordered = list(admin_client.get(changelist, {"o": "7"}).context["cl"].result_list)
    assert ordered == [answer, honest]
    page = admin_client.get(reverse("admin:answers_answer_change", args=[answer.pk]))
    html = page.content.decode()
    assert "<tr class='unsupported'><td>Zorblat flanges are forged from moon cheese" in html
    assert "brass wrenchlet every spring" in html  # the passage beside it


@pytest.mark.django_db
def test_the_offline_provider_quotes_its_sources_so_its_citations_hold(asker: Any) -> None:
    done = ask(user=asker, question="What does the global statement do?")
    answer = Answer.objects.get(pk=done.answer.answer_id)
    assert answer.citations.exists() and answer.support_min is not None
    assert answer.support_min >= SUPPORTED
