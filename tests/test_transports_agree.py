"""One answer, four ways to read it: the JSON answer, the SSE ``done``, the WebSocket's
``done`` with its Sources panel, and the answer's page. They show the same references and
the same panel, before and after a source is withdrawn from the viewer."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from bs4 import BeautifulSoup
from django.test import AsyncClient

from answers import pipeline, streams
from answers.models import Document
from tests.corpus import RESTRICTED
from tests.helpers import api_get, bearer_headers
from tests.sockets import connected, receive_until_final, scoped_socket

pytestmark = pytest.mark.django_db(transaction=True)


async def _sse_done(client: AsyncClient, answer_id: int, auth: dict) -> dict:  # type: ignore[type-arg]
    response = await api_get(client, f"/api/answers/{answer_id}/events", **auth)
    assert response.status_code == 200
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    data = [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1])


def _panel(html: str) -> str:
    panel = BeautifulSoup(html, "html.parser").select_one("[data-sources-panel]")
    assert panel is not None, html
    return " ".join(str(panel).split())


@pytest.mark.parametrize("withdrawn", [False, True], ids=["as-written", "withdrawn"])
async def test_every_transport_shows_the_same_sources(corpus, member, scripted, withdrawn):
    scripted.script = ["Launch plan [1]. ", "Lambdas [2]."]
    done = await pipeline.answer_question(
        user=member, question="Nightjar zeppelin launch hangar lambda"
    )
    assert isinstance(done, pipeline.DoneEvent)
    answer_id = done.answer.answer_id
    assert any(r.title in RESTRICTED for r in done.answer.references)
    if withdrawn:
        await sync_to_async(member.groups.clear)()  # removed from the group since

    auth = {"headers": await sync_to_async(bearer_headers)(member)}
    client = AsyncClient()
    stored = (await api_get(client, f"/api/answers/{answer_id}", **auth)).json()
    sse = await _sse_done(client, answer_id, auth)
    comm = await connected(scoped_socket(member))
    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": 0})
    socket_done = (await receive_until_final(comm))[-1]
    await comm.disconnect(timeout=30)
    await client.aforce_login(member)
    page = (await client.get(f"/answers/{answer_id}/")).content.decode()

    assert sse["type"] == socket_done["type"] == "done"
    assert sse["references"] == stored["references"] == socket_done["references"]
    assert sse["html"] == stored["html"] == socket_done["html"]
    assert _panel(socket_done["sources_html"]) == _panel(page)
    titles = [r["title"] for r in stored["references"]]
    if withdrawn:
        # Withdrawn everywhere alike: no restricted title, each unavailable one greyed out.
        assert not set(titles) & set(RESTRICTED)
        assert not all(r["available"] for r in stored["references"])
        assert not any(RESTRICTED_TITLE in page for RESTRICTED_TITLE in RESTRICTED)
    else:
        assert set(titles) & set(RESTRICTED) and all(r["available"] for r in stored["references"])


async def test_a_done_from_the_store_keeps_the_live_number_map(corpus, member, scripted):
    # Cited [2] first: renumbered, so the stream's numbers need the map to find their source.
    scripted.script = ["Lambdas [2]. ", "Launch plan [1]."]
    live = await pipeline.answer_question(
        user=member, question="Nightjar zeppelin launch hangar lambda"
    )
    assert isinstance(live, pipeline.DoneEvent)
    assert live.number_map == {2: 1, 1: 2}
    answer_id = live.answer.answer_id

    # Answered without a log (the JSON path): every follower gets the stored `done`.
    auth = {"headers": await sync_to_async(bearer_headers)(member)}
    sse = await _sse_done(AsyncClient(), answer_id, auth)
    comm = await connected(scoped_socket(member))
    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": 0})
    socket_done = (await receive_until_final(comm))[-1]
    await comm.disconnect(timeout=30)
    stored = await pipeline.stored_done(answer_id=answer_id, user=member)

    assert stored.number_map == live.number_map
    assert sse["number_map"] == socket_done["number_map"] == {"2": 1, "1": 2}


@pytest.mark.parametrize("change", ["unchanged", "deleted", "withdrawn"])
async def test_a_done_replayed_from_the_log_shows_the_sources_as_they_stand_now(
    corpus, member, scripted, change
):
    # Streamed, so its log is kept (STREAM_LOG_TTL): a client that comes back within it
    # gets the rest replayed, and its `done` must not show a deleted document as current.
    scripted.script = ["Launch plan [1]. ", "Lambdas [3]."]
    asked = await streams.answer_stream_begin(
        user=member, question="Nightjar launch plan and lambda expressions", conversation_id=None
    )
    live = [event async for event in asked.events]
    assert isinstance(live[-1].event, pipeline.DoneEvent)
    answer_id = asked.answer_id
    cited = live[-1].event.answer.references
    public = next(r.document_id for r in cited if r.title not in RESTRICTED)
    if change == "deleted":
        # Everyone could view it: still shown, from its snapshot, as removed.
        await Document.objects.filter(pk=public).adelete()
    elif change == "withdrawn":
        await sync_to_async(member.groups.clear)()

    replayed = [e async for e in streams.answer_stream_follow(answer_id=answer_id, user=member)]
    stored = await pipeline.stored_done(answer_id=answer_id, user=member)
    sse = await _sse_done(
        AsyncClient(), answer_id, {"headers": await sync_to_async(bearer_headers)(member)}
    )

    if change == "withdrawn":  # withheld from them now: the notice only, nothing logged
        assert [e.seq for e in replayed] == [None] and stored.answer.withheld
    else:
        assert [e.seq for e in replayed] == [e.seq for e in live]  # replayed from the log
    assert replayed[-1].event.to_dict() == stored.to_dict()
    assert sse["references"] == stored.to_dict()["references"]
    if change == "unchanged":
        assert replayed[-1].event.to_dict() == live[-1].event.to_dict()
    elif change == "deleted":
        gone = next(r for r in stored.answer.references if r.document_id == public)
        assert gone.source_status == "removed" and gone.url == ""
