"""The Sources panel renders each excerpt once while it is shown often (ADR 0035): what a
reader gets is what rendering it afresh gives, a re-ingested or withdrawn document shows
as it is now, and nothing of a document a reader may not view reaches their panel, however
warm the cache is with it from someone who may."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from bs4 import BeautifulSoup
from hypothesis import given, settings
from hypothesis import strategies as st

from answers import presenters
from answers.presenters import excerpt_view, snippet_of
from answers.rendering import render_passage_html
from tests.corpus import RESTRICTED, ingest_text
from tests.sockets import ask_on, connected, scoped_socket

pytestmark = pytest.mark.django_db(transaction=True)

LAMBDA = "What is a lambda expression?"
NIGHTJAR = "Nightjar zeppelin launch hangar"
# Words only the restricted documents hold.
SECRET_WORDS = ("confidential zeppelin launch programme", "helium checks happen daily")


async def _panels(user: Any, question: str) -> tuple[str, str]:
    """The provisional and the final Sources panel ``user`` gets for ``question``."""
    comm = await connected(scoped_socket(user))
    messages = await ask_on(comm, question)
    await comm.disconnect(timeout=30)
    assert messages[0]["type"] == "references" and messages[-1]["type"] == "done"
    return messages[0]["sources_html"], messages[-1]["sources_html"]


def _text(html: str) -> str:
    return " ".join(BeautifulSoup(html, "html.parser").get_text(" ").split())


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=600))
def test_a_cached_excerpt_is_what_rendering_it_again_gives(text: str) -> None:
    first = excerpt_view(text)
    again = excerpt_view(text)
    assert first.snippet == again.snippet == snippet_of(text)
    assert first.html == again.html == render_passage_html(text)


def test_the_cache_is_bounded() -> None:
    excerpt_view.cache_clear()
    for number in range(presenters.EXCERPT_CACHE_SIZE + 50):
        excerpt_view(f"Passage number {number}.")
    assert excerpt_view.cache_info().currsize == presenters.EXCERPT_CACHE_SIZE


async def test_a_reingested_document_shows_its_new_passage(corpus: None, asker: Any) -> None:
    def ingest(body: str) -> None:
        ingest_text("notes:quokka", "Quokka care notes", body)

    await sync_to_async(ingest)("Quokka burrows are swept every Tuesday by the keepers.")
    before, _ = await _panels(asker, "When are quokka burrows swept?")
    assert "swept every Tuesday" in _text(before)

    await sync_to_async(ingest)("Quokka burrows are swept every Friday by the volunteers.")
    provisional, final = await _panels(asker, "When are quokka burrows swept?")
    for panel in (provisional, final):
        assert "swept every Friday by the volunteers" in _text(panel)
        assert "Tuesday" not in panel


async def test_a_restricted_passage_never_reaches_a_reader_who_may_not_view_it(
    corpus: None, member: Any, asker: Any
) -> None:
    # The member's panels put the restricted excerpts in the cache.
    provisional, _ = await _panels(member, NIGHTJAR)
    assert any(title in provisional for title in RESTRICTED)
    assert any(words in _text(provisional) for words in SECRET_WORDS)

    # Someone outside the group asks the same: none of it, in either panel.
    for panel in await _panels(asker, NIGHTJAR):
        assert not any(title in panel for title in RESTRICTED)
        assert not any(words in _text(panel) for words in SECRET_WORDS)


async def test_a_withdrawn_document_leaves_the_next_panel(corpus: None, member: Any) -> None:
    provisional, _ = await _panels(member, NIGHTJAR)
    assert any(words in _text(provisional) for words in SECRET_WORDS)

    await sync_to_async(member.groups.clear)()  # removed from the group since
    for panel in await _panels(member, NIGHTJAR):
        assert not any(title in panel for title in RESTRICTED)
        assert not any(words in _text(panel) for words in SECRET_WORDS)
