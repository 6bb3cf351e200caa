from __future__ import annotations

import json
import uuid

import pytest
from bs4 import BeautifulSoup
from channels.db import database_sync_to_async

from answers.models import Answer
from answers.streams import answer_streams_wait
from tests.corpus import RESTRICTED
from tests.sockets import ask_on, connected, receive_until_final, scoped_socket, session_socket

pytestmark = pytest.mark.django_db(transaction=True)

UNKNOWN_ID = uuid.UUID("98f0452a-f795-40e9-b864-e5a2a372f93c")


LAMBDA = "What is a lambda expression?"


async def streaming(user, settings, *, delay: float):  # type: ignore[no-untyped-def]
    """A socket with an answer to LAMBDA under way (its references received), each
    extractive token ``delay`` seconds apart: the socket and those references."""
    settings.ANSWERS = {**settings.ANSWERS, "EXTRACTIVE_DELAY": delay}
    comm = await connected(scoped_socket(user))
    await comm.send_json_to({"type": "ask", "question": LAMBDA})
    first = await comm.receive_json_from(timeout=30)
    assert first["type"] == "references"
    return comm, first


async def test_events_arrive_in_order_with_server_rendered_panels(corpus, asker, client):
    comm = await connected(await session_socket(client, asker))
    messages = await ask_on(comm, LAMBDA)
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "references" and kinds[-1] == "done"
    assert set(kinds[1:-1]) <= {"token", "citation"} and "token" in kinds
    references = messages[0]
    panel = BeautifulSoup(references["sources_html"], "html.parser")
    assert panel.select_one("[data-sources-panel]")["data-state"] == "provisional"
    assert [int(li["data-number"]) for li in panel.select("li.source")] == [
        r["index"] for r in references["references"]
    ]
    done = messages[-1]
    final = BeautifulSoup(done["sources_html"], "html.parser")
    assert final.select_one("[data-sources-panel]")["data-state"] == "final"
    ids = {li["id"] for li in final.select("li.source")}
    assert [li.select_one(".source-title").get_text() for li in final.select("li.source")] == [
        r["title"] for r in done["references"]
    ]
    html = BeautifulSoup(done["html"], "html.parser")
    links = [a["href"] for a in html.select("a.citation")]
    assert links and all(href[1:] in ids for href in links)
    streamed = "".join(m["text"] for m in messages if m["type"] == "token")
    stored = await Answer.objects.aget(pk=done["answer_id"])
    assert stored.status == "complete" and stored.raw_text == streamed
    await comm.disconnect(timeout=30)


async def test_stop_cancels_generation_and_stores_the_partial_answer(corpus, asker, settings):
    comm, first = await streaming(asker, settings, delay=0.2)
    token = await comm.receive_json_from(timeout=30)
    assert token["type"] in ("token", "citation")
    await comm.send_json_to({"type": "stop"})
    messages = await receive_until_final(comm)
    assert messages[-1]["type"] == "done" and messages[-1]["status"] == "interrupted"
    stored = await Answer.objects.aget(pk=first["answer_id"])
    assert stored.status == "interrupted" and stored.raw_text
    assert stored.final_text == messages[-1]["text"]
    # The socket stays usable.
    await comm.send_json_to({"type": "ask", "question": LAMBDA})
    assert (await comm.receive_json_from(timeout=30))["type"] == "references"
    await comm.send_json_to({"type": "stop"})
    assert (await receive_until_final(comm))[-1]["status"] == "interrupted"
    await comm.disconnect(timeout=30)


async def test_a_stop_sent_right_after_resume_stops_the_answer(corpus, asker, settings):
    """A second socket resumes an answer under way and stops it before its first event:
    the stop waits for the resumed answer instead of being dropped."""
    comm, first = await streaming(asker, settings, delay=0.2)
    other = await connected(scoped_socket(asker))
    await other.send_json_to({"type": "resume", "answer_id": first["answer_id"], "after": 0})
    await other.send_json_to({"type": "stop"})
    messages = await receive_until_final(other)
    assert messages[-1]["type"] == "done" and messages[-1]["status"] == "interrupted"
    assert (await receive_until_final(comm))[-1]["status"] == "interrupted"
    stored = await Answer.objects.aget(pk=first["answer_id"])
    assert stored.status == "interrupted"
    await other.disconnect(timeout=30)
    await comm.disconnect(timeout=30)


async def test_a_stop_after_access_was_lost_is_an_error_not_a_dead_socket(corpus, asker, settings):
    from django.contrib.auth.models import Permission

    comm, _ = await streaming(asker, settings, delay=0.2)
    ask = await Permission.objects.aget(codename="ask_question")
    await database_sync_to_async(asker.user_permissions.remove)(ask)
    await comm.send_json_to({"type": "stop"})
    error = await comm.receive_json_from(timeout=30)
    while error["type"] != "error":  # tokens still under way
        error = await comm.receive_json_from(timeout=30)
    assert error["code"] == "not_found" and error["message"]
    await comm.disconnect(timeout=30)


async def test_a_failing_user_check_still_gets_a_reply(corpus, asker, monkeypatch):
    from answers import selectors

    def broken(**kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("the database went away")

    monkeypatch.setattr(selectors, "user_get_current", broken)
    comm = await connected(scoped_socket(asker))
    for frame in ({"type": "ask", "question": LAMBDA}, {"type": "resume", "answer_id": 1}):
        await comm.send_json_to(frame)
        messages = await receive_until_final(comm)
        assert [(m["type"], m["code"]) for m in messages] == [("error", "failed")]
    await comm.disconnect(timeout=30)


async def test_a_disconnect_leaves_the_answer_generating_to_the_end(corpus, asker, settings):
    comm, first = await streaming(asker, settings, delay=0.05)
    await comm.receive_json_from(timeout=30)
    await comm.disconnect(timeout=30)
    await answer_streams_wait(timeout=30)
    stored = await Answer.objects.aget(pk=first["answer_id"])
    assert stored.status == "complete" and stored.final_text


async def test_a_second_ask_while_streaming_gets_a_clear_error(corpus, asker, settings):
    comm, _ = await streaming(asker, settings, delay=0.2)
    await comm.send_json_to({"type": "ask", "question": "Another?"})
    seen = []
    while True:
        message = await comm.receive_json_from(timeout=30)
        seen.append(message)
        if message["type"] == "error":
            break
    assert seen[-1]["code"] == "busy"
    await comm.send_json_to({"type": "stop"})
    await receive_until_final(comm)
    await comm.disconnect(timeout=30)


# Refused after the handshake, not at it: a browser sees a refused handshake only as a
# dropped connection (1006) and would retry it forever; a close code it can read tells
# the page to send the user to log in (4401) or to stop trying (4403).


async def test_anonymous_users_are_told_to_log_in_and_closed_4401(corpus):
    from django.contrib.auth.models import AnonymousUser

    comm = scoped_socket(AnonymousUser())
    assert (await comm.connect(timeout=30))[0]
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == "signed_out"
    assert "log in" in error["message"]
    assert await comm.receive_output(timeout=30) == {"type": "websocket.close", "code": 4401}


async def test_users_without_the_ask_permission_are_told_so_and_closed_4403(corpus, no_ask_user):
    comm = scoped_socket(no_ask_user)
    assert (await comm.connect(timeout=30))[0]
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == "forbidden"
    assert error["message"] == "You do not have permission to ask questions."
    assert await comm.receive_output(timeout=30) == {"type": "websocket.close", "code": 4403}


@pytest.mark.parametrize("origin", [(b"origin", b"https://evil.example"), None])
async def test_foreign_or_missing_origins_are_refused(corpus, asker, client, origin):
    comm = await session_socket(client, asker, origin=origin)
    accepted, _ = await comm.connect(timeout=30)
    assert not accepted


async def test_a_restricted_document_never_appears_for_an_outsider(corpus, asker):
    comm = await connected(scoped_socket(asker))
    messages = await ask_on(comm, "Nightjar zeppelin launch hangar")
    blob = json.dumps(messages)
    for title in RESTRICTED:
        assert title not in blob
    assert "helium" not in blob and "hangar nine" not in blob
    await comm.disconnect(timeout=30)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", "bad_message"),
        ("[1, 2]", "bad_message"),
        ('{"type": "dance"}', "bad_message"),
        ('{"type": "ask", "question": ""}', "invalid_question"),
        ('{"type": "ask", "question": 5}', "invalid_question"),
        ('{"type": "ask", "question": "q", "conversation_id": "nope"}', "invalid"),
        (
            # A fixed id no conversation has (the same in every run and test worker).
            json.dumps({"type": "ask", "question": "q", "conversation_id": str(UNKNOWN_ID)}),
            "not_found",
        ),
        ('{"type": "stop"}', "idle"),
        (json.dumps({"type": "ask", "question": "x" * 60000}), "too_large"),
    ],
)
async def test_bad_messages_get_an_error_and_the_socket_survives(corpus, asker, frame, code):
    comm = await connected(scoped_socket(asker))
    await comm.send_to(text_data=frame)
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == code and error["message"]
    assert (await ask_on(comm, LAMBDA))[-1]["type"] == "done"
    await comm.disconnect(timeout=30)


async def test_the_longest_question_fits_a_frame_however_it_is_escaped(corpus, asker):
    """A question the API takes is taken over the socket too: at its longest, in
    characters outside the BMP, as ASCII-only JSON writes them (12 characters each)."""
    from answers.conf import answers_settings

    longest = int(answers_settings.MAX_QUESTION_LENGTH)
    question = "What is a lambda expression? " + "\U0001f600" * (longest - 29)
    frame = json.dumps({"type": "ask", "question": question})
    assert len(frame) > 12 * (longest - 29)
    comm = await connected(scoped_socket(asker))
    await comm.send_to(text_data=frame)
    events = await receive_until_final(comm)
    assert events[-1]["type"] == "done", events[-1]
    await comm.disconnect(timeout=30)


@pytest.mark.parametrize("path", ["/ws/nope/", "/ws/answers", "/"])
async def test_a_socket_to_an_unknown_path_is_refused_cleanly(asker, path):
    accepted, code = await scoped_socket(asker, path=path).connect(timeout=30)
    assert not accepted and code == 1000


async def test_binary_frames_are_refused_politely(corpus, asker):
    comm = await connected(scoped_socket(asker))
    await comm.send_to(bytes_data=b"\x00\x01")
    assert (await comm.receive_json_from(timeout=30))["code"] == "bad_message"
    await comm.disconnect(timeout=30)


async def test_follow_up_continues_the_conversation(corpus, asker):
    comm = await connected(scoped_socket(asker))
    first = await ask_on(comm, LAMBDA)
    conversation = first[0]["conversation_id"]
    await comm.send_json_to(
        {"type": "ask", "question": "and how does it differ from a def function?",
         "conversation_id": conversation}
    )  # fmt: skip
    second = await receive_until_final(comm)
    assert second[0]["turn"] == 2 and second[0]["conversation_id"] == conversation
    assert second[0]["answer_id"] != first[0]["answer_id"]
    await comm.disconnect(timeout=30)


async def test_the_socket_and_the_json_path_give_the_same_done(corpus, asker):
    from answers.pipeline import answer_question

    comm = await connected(scoped_socket(asker))
    done = (await ask_on(comm, "How do generators work?"))[-1]
    await comm.disconnect(timeout=30)
    json_done = (await answer_question(user=asker, question="How do generators work?")).to_dict()
    for key in ("status", "text"):
        assert done[key] == json_done[key]
    # Two answers: the same references but for the anchors, which are per answer.
    assert [{**r, "anchor": ""} for r in done["references"]] == [
        {**r, "anchor": ""} for r in json_done["references"]
    ]
    assert done["number_map"] == json_done["number_map"]


async def test_a_deactivated_users_socket_is_closed_at_the_next_question(corpus, asker, client):
    comm = await connected(await session_socket(client, asker))
    asker.is_active = False
    await asker.asave(update_fields=["is_active"])
    await comm.send_json_to({"type": "ask", "question": LAMBDA})
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == "signed_out"
    assert (await comm.receive_output(timeout=30))["type"] == "websocket.close"


async def test_a_password_change_closes_the_other_sessions_sockets(corpus, asker, client):
    """A new password signs the user's other sessions out (Django keeps a hash of it in
    each session and drops those that no longer match): a socket opened on one of them
    is closed at its next question, as the session's next page request would be."""
    comm = await connected(await session_socket(client, asker))
    asker.set_password("a brand-new passphrase for the test")
    await asker.asave(update_fields=["password"])
    await comm.send_json_to({"type": "ask", "question": LAMBDA})
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == "signed_out"
    assert (await comm.receive_output(timeout=30))["type"] == "websocket.close"


async def test_a_rotated_secret_key_leaves_open_sockets_and_their_sessions_alone(
    corpus, asker, client, settings
):
    """A session signed in under a secret key now among ``SECRET_KEY_FALLBACKS`` still
    holds its user, and the socket's check only reads: Django re-keys such a session on a
    page request, where the new cookie reaches the browser; re-keyed from the socket, the
    browser's cookie would name a deleted session (signed out at its next page)."""
    from django.contrib.sessions.models import Session

    comm = await connected(await session_socket(client, asker))
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a rotated secret key for the test, " + "k" * 30
    assert (await ask_on(comm, LAMBDA))[-1]["type"] == "done"
    kept = client.cookies["sessionid"].value
    assert await Session.objects.filter(session_key=kept).aexists()
    await comm.disconnect(timeout=30)


async def test_group_changes_apply_to_the_next_question_on_an_open_socket(corpus, member, client):
    comm = await connected(await session_socket(client, member))
    question = "Nightjar zeppelin launch hangar"
    before = json.dumps(await ask_on(comm, question))
    assert any(title in before for title in RESTRICTED)
    await database_sync_to_async(member.groups.clear)()
    after = json.dumps(await ask_on(comm, question))
    assert not any(title in after for title in RESTRICTED)
    await comm.disconnect(timeout=30)
