from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from answers.pipeline import CitationEvent, DoneEvent, TokenEvent, coalesced
from answers.types import AnswerPayload
from tests.sockets import receive_until_final, scoped_socket


async def _source(plan):  # type: ignore[no-untyped-def]
    for delay, event in plan:
        await asyncio.sleep(delay)
        yield event


def _run(plan, window):  # type: ignore[no-untyped-def]
    async def collect():  # type: ignore[no-untyped-def]
        return [e async for e in coalesced(_source(plan), window=window)]

    return async_to_sync(collect)()


DONE = DoneEvent(AnswerPayload(1, "c", 1, "complete", "ab", "", []))


def test_tokens_within_the_window_become_one_frame_and_order_is_kept():
    plan = [(0, TokenEvent("a")), (0, TokenEvent("b")), (0, CitationEvent(1, 9)),
            (0, TokenEvent("c")), (0, DONE)]  # fmt: skip
    events = _run(plan, window=0.05)
    assert [(e.type, getattr(e, "text", None)) for e in events] == [
        ("token", "ab"), ("citation", None), ("token", "c"), ("done", None),
    ]  # fmt: skip


def test_a_pause_longer_than_the_window_flushes_what_is_pending():
    plan = [(0, TokenEvent("a")), (0.2, TokenEvent("b")), (0, DONE)]
    events = _run(plan, window=0.02)
    assert [getattr(e, "text", None) for e in events] == ["a", "b", None]


def test_a_zero_window_passes_every_event_through():
    plan = [(0, TokenEvent("a")), (0, TokenEvent("b")), (0, DONE)]
    assert [getattr(e, "text", None) for e in _run(plan, window=0)] == ["a", "b", None]


@pytest.mark.django_db(transaction=True)
def test_the_socket_sends_fewer_frames_with_the_same_text_and_still_stops(corpus, asker, settings):
    async def ask(window_ms: int):  # type: ignore[no-untyped-def]
        settings.ANSWERS = {**settings.ANSWERS, "STREAM_COALESCE_MS": window_ms}
        comm = scoped_socket(asker)
        assert (await comm.connect(timeout=30))[0]
        await comm.send_json_to({"type": "ask", "question": "What is a lambda expression?"})
        messages = await receive_until_final(comm)
        await comm.disconnect(timeout=30)
        return messages

    plain = async_to_sync(ask)(0)
    merged = async_to_sync(ask)(500)
    tokens = [m for m in plain if m["type"] == "token"]
    merged_tokens = [m for m in merged if m["type"] == "token"]
    assert "".join(m["text"] for m in merged_tokens) == "".join(m["text"] for m in tokens)
    assert len(merged_tokens) < len(tokens)
    assert merged[-1]["text"] == plain[-1]["text"]


@pytest.mark.django_db(transaction=True)
def test_stop_still_interrupts_a_coalesced_stream(corpus, asker, settings):
    from answers.models import Answer

    settings.ANSWERS = {**settings.ANSWERS, "STREAM_COALESCE_MS": 50, "EXTRACTIVE_DELAY": 0.1}

    async def run():  # type: ignore[no-untyped-def]
        comm = scoped_socket(asker)
        assert (await comm.connect(timeout=30))[0]
        await comm.send_json_to({"type": "ask", "question": "What is a lambda expression?"})
        first = await comm.receive_json_from(timeout=30)
        while (await comm.receive_json_from(timeout=30))["type"] != "token":
            pass
        await comm.send_json_to({"type": "stop"})
        messages = await receive_until_final(comm)
        await comm.disconnect(timeout=30)
        return first, messages[-1]

    first, last = async_to_sync(run)()
    assert last["type"] == "done" and last["status"] == "interrupted"
    assert Answer.objects.get(pk=first["answer_id"]).status == "interrupted"
