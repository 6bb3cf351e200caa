"""Resumable streams: an answer's generation outlives the socket that asked for it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from bs4 import BeautifulSoup
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.test import AsyncClient
from django.utils import timezone

from answers import pipeline, streams
from answers.events import StreamEvent, TokenEvent
from answers.models import Answer
from answers.streams import log as stream_log
from answers.streams.generation import LocalStream
from answers.streams.relay import follow_here
from tests.helpers import api_get, api_post, assert_json_error, bearer_headers
from tests.sockets import receive_until_final, scoped_socket

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "What is a lambda expression?"


@pytest.fixture
def slow(settings):  # type: ignore[no-untyped-def]
    """Slow enough to drop and reconnect mid-answer."""
    settings.ANSWERS = {**settings.ANSWERS, "EXTRACTIVE_DELAY": 0.05}


async def connected(user):  # type: ignore[no-untyped-def]
    comm = scoped_socket(user)
    assert (await comm.connect(timeout=30))[0]
    return comm


def tokens(messages: list[dict]) -> str:
    return "".join(m["text"] for m in messages if m["type"] == "token")


async def test_every_event_carries_consecutive_sequence_numbers(corpus, asker):
    comm = await connected(asker)
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    messages = await receive_until_final(comm)
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1))
    await comm.disconnect(timeout=30)


async def test_a_client_that_drops_resumes_the_rest_of_its_answer(corpus, asker, slow):
    first = await connected(asker)
    await first.send_json_to({"type": "ask", "question": QUESTION})
    before = [await first.receive_json_from(timeout=30) for _ in range(3)]
    await first.disconnect(timeout=30)

    second = await connected(asker)
    answer_id, after = before[0]["answer_id"], before[-1]["seq"]
    await second.send_json_to({"type": "resume", "answer_id": answer_id, "after": after})
    rest = await receive_until_final(second, timeout=10)
    await second.disconnect(timeout=30)

    assert [m["seq"] for m in before + rest] == list(range(1, len(before) + len(rest) + 1))
    stored = await Answer.objects.aget(pk=answer_id)
    assert stored.status == "complete"
    assert tokens(before + rest) == stored.raw_text
    done = rest[-1]
    assert done["type"] == "done" and done["text"] == stored.final_text
    panel = BeautifulSoup(done["sources_html"], "html.parser").select_one("[data-sources-panel]")
    assert panel["data-state"] == "final"


async def test_a_second_tab_watches_the_same_answer_from_the_start(corpus, asker, slow):
    asking = await connected(asker)
    await asking.send_json_to({"type": "ask", "question": QUESTION})
    references = await asking.receive_json_from(timeout=30)
    watching = await connected(asker)
    await watching.send_json_to(
        {"type": "resume", "answer_id": references["answer_id"], "after": 0}
    )
    asked = [references, *await receive_until_final(asking, timeout=10)]
    watched = await receive_until_final(watching, timeout=10)
    assert [(m["seq"], m["type"]) for m in watched] == [(m["seq"], m["type"]) for m in asked]
    assert tokens(watched) == tokens(asked) and watched[-1]["text"] == asked[-1]["text"]
    await asking.disconnect(timeout=30)
    await watching.disconnect(timeout=30)


@pytest.fixture
def patient(settings):  # type: ignore[no-untyped-def]
    """A follower that hears nothing waits an hour before it looks at the log or the store
    again: a test that needs that wait times out."""
    settings.ANSWERS = {**settings.ANSWERS, "STREAM_POLL_INTERVAL": 3600}


async def _asked_to_the_end(user) -> list[dict]:  # type: ignore[no-untyped-def]
    comm = await connected(user)
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    asked = await receive_until_final(comm)
    await comm.disconnect(timeout=30)
    await streams.answer_streams_wait(timeout=10)
    return asked


async def test_resuming_after_the_done_over_sse_ends_at_once_with_nothing(corpus, asker, patient):
    asked = await _asked_to_the_end(asker)
    answer_id, last = asked[0]["answer_id"], asked[-1]["seq"]
    auth = await sync_to_async(bearer_headers)(asker)
    response = await api_get(
        AsyncClient(), f"/api/answers/{answer_id}/events?after={last}", headers=auth
    )
    assert response.status_code == 200
    body = await asyncio.wait_for(_body(response), timeout=30)
    assert body == b""  # not a second `done`


async def _body(response) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join([chunk async for chunk in response.streaming_content])


async def test_resuming_after_the_done_over_a_socket_ends_at_once_with_nothing(
    corpus, asker, patient
):
    asked = await _asked_to_the_end(asker)
    answer_id, last = asked[0]["answer_id"], asked[-1]["seq"]
    comm = await connected(asker)
    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": last})

    async def next_word() -> dict:  # type: ignore[type-arg]
        # Busy while that follow runs; once it has ended, a resume from one before the end
        # gets the `done` alone.
        while True:
            await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": last - 1})
            message = await comm.receive_json_from(timeout=30)
            if (message["type"], message.get("code")) != ("error", "busy"):
                return message

    assert await asyncio.wait_for(next_word(), timeout=30) == asked[-1]
    assert await comm.receive_nothing()
    await comm.disconnect(timeout=30)


async def test_resuming_past_anything_logged_gets_the_stored_result_at_once(corpus, asker, patient):
    asked = await _asked_to_the_end(asker)
    answer_id, last = asked[0]["answer_id"], asked[-1]["seq"]
    comm = await connected(asker)
    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": last + 5})
    (stored,) = await receive_until_final(comm)
    assert stored["type"] == "done" and stored["seq"] is None
    assert stored["text"] == asked[-1]["text"]
    await comm.disconnect(timeout=30)


async def test_a_follower_here_after_the_done_gets_nothing_more(corpus, asker):
    asked = await _asked_to_the_end(asker)
    answer_id, last = asked[0]["answer_id"], asked[-1]["seq"]
    # The generation's own record, as followers in its process read it until it is gone.
    local = LocalStream()
    for message in asked:
        local.add(StreamEvent.from_dict(message))
    local.end()
    follow = follow_here(local, answer_id=answer_id, user=asker, after=last)
    assert [event async for event in follow] == []


async def test_resuming_a_finished_answer_replays_its_log_then_the_stored_result(corpus, asker):
    comm = await connected(asker)
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    asked = await receive_until_final(comm)
    answer_id = asked[0]["answer_id"]

    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": 2})
    replayed = await receive_until_final(comm)
    assert replayed == asked[2:]

    # The log has expired.
    stream = stream_log.stream_name(await Answer.objects.aget(pk=answer_id))
    keys = [stream_log.log_key(stream, part) for part in [*range(1, len(asked) + 1), "last"]]
    await asyncio.to_thread(cache.delete_many, keys)
    await comm.send_json_to({"type": "resume", "answer_id": answer_id, "after": 2})
    (stored,) = await receive_until_final(comm)
    assert stored["type"] == "done" and stored["seq"] is None
    assert stored["status"] == "complete" and stored["text"] == asked[-1]["text"]
    assert stored["references"] == asked[-1]["references"]
    await comm.disconnect(timeout=30)


async def test_an_asker_who_leaves_while_the_stream_starts_leaves_no_answer_streaming(
    corpus, asker, monkeypatch
):
    """With a shared layer the stream first listens for "stop" from other processes; an
    asker cancelled during that wait (a socket closed, a request dropped) must not leave
    its stored answer "streaming" with nothing to end it (followers waited, the asker's
    slot stayed taken)."""
    from answers.streams import generation

    entered = asyncio.Event()

    class Hanging:
        async def acquire(self) -> None:
            entered.set()
            await asyncio.Event().wait()  # a Redis round trip that has not come back

    monkeypatch.setattr(generation, "layer_is_shared", lambda: True)
    monkeypatch.setattr(generation, "control_for_loop", lambda: Hanging())
    run = await pipeline.start_answer(user=asker, question="What is a lambda expression?")
    starting = asyncio.create_task(generation.answer_stream_start(run=run))
    await entered.wait()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    stored = await Answer.objects.aget(pk=run.answer.pk)
    assert stored.status == Answer.Status.FAILED and stored.error


async def test_a_follower_never_passes_a_gap_that_the_log_lost_too(
    corpus, asker, settings, monkeypatch
):
    """A follower elsewhere fills what the layer dropped from the log; when the log lost
    it too (evicted before its time) while the answer goes on, the follower waits for the
    stored result, which holds everything, instead of passing the gap."""
    from answers.events import StreamEvent
    from answers.streams import relay

    settings.ANSWERS = {**settings.ANSWERS, "STREAM_POLL_INTERVAL": 0.05}
    run = await pipeline.start_answer(user=asker, question="What is a lambda expression?")
    stream = stream_log.stream_name(run.answer)  # stored as streaming, generated nowhere
    entries = [StreamEvent(seq=n, event=TokenEvent(f"t{n}")).to_dict() for n in (1, 2, 3)]
    await stream_log.log_write(stream, entries)
    await sync_to_async(stream_log.stream_cache().delete)(stream_log.log_key(stream, 1))
    checks = 0
    settled = relay._settled

    async def counted(answer_id, user):  # type: ignore[no-untyped-def]
        nonlocal checks
        checks += 1
        return await settled(answer_id, user)

    monkeypatch.setattr(relay, "_settled", counted)
    received: list[StreamEvent] = []

    async def follow() -> None:
        async for event in streams.answer_stream_follow(answer_id=run.answer.pk, user=asker):
            received.append(event)

    following = asyncio.create_task(follow())
    while not checks:  # subscribed, and the log found partly gone (its first check)
        await asyncio.sleep(0.01)
    fourth = StreamEvent(seq=4, event=TokenEvent("t4")).to_dict()
    await stream_log.layer_publish(stream, [fourth])
    while checks < 3 and not received:  # the gap met: waiting, or (before) passed
        await asyncio.sleep(0.01)
    await run.fail("ended for the test")
    await asyncio.wait_for(following, timeout=10)
    assert [event.seq for event in received] == [None]  # only the stored result
    assert received[0].terminal


async def test_only_the_owner_may_resume(corpus, asker, other_asker, slow):
    comm = await connected(asker)
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    answer_id = (await comm.receive_json_from(timeout=30))["answer_id"]
    intruder = await connected(other_asker)
    for target in (answer_id, answer_id + 1000):
        await intruder.send_json_to({"type": "resume", "answer_id": target, "after": 0})
        error = await intruder.receive_json_from(timeout=30)
        assert error["type"] == "error" and error["code"] == "not_found"
        assert error["message"] == "answer not found"
    # A stop from someone else's socket reaches nothing: it follows no answer.
    await intruder.send_json_to({"type": "stop"})
    assert (await intruder.receive_json_from(timeout=30))["code"] == "idle"
    assert (await receive_until_final(comm, timeout=10))[-1]["status"] == "complete"
    await comm.disconnect(timeout=30)
    await intruder.disconnect(timeout=30)


@pytest.mark.parametrize(
    "message",
    [
        {"type": "resume"},
        {"type": "resume", "answer_id": "7"},
        {"type": "resume", "answer_id": 0},
        {"type": "resume", "answer_id": True},
        {"type": "resume", "answer_id": 1.5},
        {"type": "resume", "answer_id": 2**64},
        {"type": "resume", "answer_id": 1, "after": -1},
        {"type": "resume", "answer_id": 1, "after": "3"},
    ],
)
async def test_bad_resume_messages_get_a_clear_error(corpus, asker, message):
    comm = await connected(asker)
    await comm.send_json_to(message)
    error = await comm.receive_json_from(timeout=30)
    assert error["type"] == "error" and error["code"] == "invalid" and error["message"]
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    assert (await receive_until_final(comm))[-1]["type"] == "done"
    await comm.disconnect(timeout=30)


async def test_stop_from_a_resumed_socket_stops_the_answer_for_every_follower(corpus, asker, slow):
    asking = await connected(asker)
    await asking.send_json_to({"type": "ask", "question": QUESTION})
    answer_id = (await asking.receive_json_from(timeout=30))["answer_id"]
    await asking.receive_json_from(timeout=30)
    other_tab = await connected(asker)
    await other_tab.send_json_to({"type": "resume", "answer_id": answer_id, "after": 0})
    await other_tab.receive_json_from(timeout=30)
    await other_tab.send_json_to({"type": "stop"})
    for comm in (asking, other_tab):
        done = (await receive_until_final(comm, timeout=10))[-1]
        assert done["type"] == "done" and done["status"] == "interrupted"
    stored = await Answer.objects.aget(pk=answer_id)
    assert stored.status == "interrupted" and stored.final_text == done["text"]
    await asking.disconnect(timeout=30)
    await other_tab.disconnect(timeout=30)


async def test_stop_sent_while_the_question_is_prepared_is_not_lost(corpus, asker, slow):
    comm = await connected(asker)
    await comm.send_json_to({"type": "ask", "question": QUESTION})
    await comm.send_json_to({"type": "stop"})
    messages = await receive_until_final(comm, timeout=10)
    assert messages[-1]["type"] == "done" and messages[-1]["status"] == "interrupted"
    await comm.disconnect(timeout=30)


# The follower on its own, with hand-made logs: what the layer may do, on purpose.


async def _log(answer: Answer, seq: int, kind: str, **data: object) -> dict:
    entry = {"seq": seq, "type": kind, **data}
    await stream_log.log_write(stream_log.stream_name(answer), [entry])
    return entry


async def _answer(asker) -> Answer:  # type: ignore[no-untyped-def]
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    return run.answer


class LogReads:
    """How often followers have read the stream log so far. A follower with nothing to
    replay joins its group, then reads the log (its replay), then re-reads it at every
    quiet poll: a test waits for the read it needs rather than for a guessed time."""

    def __init__(self) -> None:
        self.count = 0
        self._read = asyncio.Event()

    def add(self) -> None:
        self.count += 1
        self._read.set()

    async def reached(self, count: int) -> None:
        async def reads() -> None:
            while self.count < count:
                self._read.clear()
                await self._read.wait()

        await asyncio.wait_for(reads(), timeout=30)  # generous: CI is loaded


@pytest.fixture
def log_reads(monkeypatch) -> LogReads:  # type: ignore[no-untyped-def]
    from answers.streams import relay

    counted = LogReads()
    read = relay.log_read

    async def log_read(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return await read(*args, **kwargs)
        finally:
            counted.add()

    monkeypatch.setattr(relay, "log_read", log_read)
    return counted


async def test_a_message_the_layer_dropped_is_read_from_the_log(corpus, asker, log_reads):
    answer = await _answer(asker)
    follow = streams.answer_stream_follow(answer_id=answer.pk, user=asker, after=0)
    first = asyncio.ensure_future(anext(follow))
    await log_reads.reached(1)  # subscribed, found no log, now listening
    entries = [await _log(answer, seq, "token", text=f"t{seq}") for seq in (1, 2, 3)]
    layer = get_channel_layer()
    # Only the third reaches the group; the first two were "dropped".
    group = stream_log.answer_group(stream_log.stream_name(answer))
    await layer.group_send(group, {"type": "answer.event", "event": entries[2]})
    got = [await first, await anext(follow), await anext(follow)]
    assert [(e.seq, e.event.text) for e in got] == [(1, "t1"), (2, "t2"), (3, "t3")]
    await follow.aclose()


def test_one_event_travels_alone_as_it_always_has_and_several_in_order():
    entries = [{"seq": seq, "type": "token", "text": f"t{seq}"} for seq in (1, 2, 3)]
    # The one-event shape is the one an older process reads (a rolling deploy).
    assert stream_log.layer_message(entries[:1]) == {"type": "answer.event", "event": entries[0]}
    carried = stream_log.layer_events(stream_log.layer_message(entries))
    assert [e.to_dict() for e in carried] == entries
    assert stream_log.layer_events(stream_log.WAKE) == []


async def test_a_follower_unpacks_batches_in_order_skipping_what_it_has_and_filling_gaps(
    corpus, asker, log_reads
):
    answer = await _answer(asker)
    follow = streams.answer_stream_follow(answer_id=answer.pk, user=asker, after=0)
    first = asyncio.ensure_future(anext(follow))
    await log_reads.reached(1)  # subscribed, found no log, now listening
    # 1 and 2 only in the log (the message that carried them was dropped), then 3-5 in one
    # message, then 4-7 (4 and 5 again): those only on the layer.
    entries = [await _log(answer, seq, "token", text=f"t{seq}") for seq in (1, 2)]
    entries += [{"seq": seq, "type": "token", "text": f"t{seq}"} for seq in range(3, 7)]
    entries.append(
        {"seq": 7, "type": "error", "message": "over", "code": "interrupted", "answer_id": None}
    )
    layer = get_channel_layer()
    group = stream_log.answer_group(stream_log.stream_name(answer))
    for batch in (entries[2:5], entries[3:7]):
        await layer.group_send(group, stream_log.layer_message(batch))
    got = [await first] + [event async for event in follow]
    assert [e.to_dict() for e in got] == entries


async def test_a_quiet_stream_is_caught_up_from_the_log(corpus, asker, settings, log_reads):
    settings.ANSWERS = {**settings.ANSWERS, "STREAM_POLL_INTERVAL": 0.1}
    answer = await _answer(asker)
    follow = streams.answer_stream_follow(answer_id=answer.pk, user=asker, after=0)
    first = asyncio.ensure_future(anext(follow))
    await log_reads.reached(1)  # replayed (nothing yet): only a poll can find what follows
    await _log(answer, 1, "token", text="only in the log")
    assert (await asyncio.wait_for(first, timeout=30)).event.text == "only in the log"
    await follow.aclose()


async def test_an_answer_whose_process_died_ends_with_an_error(corpus, asker, settings):
    settings.ANSWERS = {**settings.ANSWERS, "STREAM_POLL_INTERVAL": 0.1}
    answer = await _answer(asker)
    long_ago = timezone.now() - timedelta(hours=1)
    await Answer.objects.filter(pk=answer.pk).aupdate(created_at=long_ago)
    events = [e async for e in streams.answer_stream_follow(answer_id=answer.pk, user=asker)]
    assert [(e.seq, e.event.type) for e in events] == [(None, "error")]
    assert events[0].event.message == streams.ABANDONED_MESSAGE


async def test_an_unreachable_channel_layer_refuses_the_stream_and_stores_the_failure(
    corpus, asker, settings
):
    from django.test import AsyncClient

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},  # nothing listens there
        }
    }
    auth = await sync_to_async(bearer_headers)(asker, name="t")
    response = await api_post(
        AsyncClient(), "/api/answers", {"question": QUESTION},
        headers={"Accept": "text/event-stream", **auth},
    )  # fmt: skip
    assert_json_error(response, 503, "unavailable")
    answer = await Answer.objects.aget()
    assert answer.status == "failed" and "channel layer" in answer.error


async def test_a_reused_answer_id_never_meets_the_old_answers_log(
    corpus, asker, settings, log_reads
):
    settings.ANSWERS = {**settings.ANSWERS, "STREAM_POLL_INTERVAL": 0.1}
    answer = await _answer(asker)
    # The log of an earlier answer that had this id (a database recreated or restored).
    earlier = Answer(pk=answer.pk, created_at=answer.created_at - timedelta(days=1))
    await _log(earlier, 1, "done", text="someone else's answer")
    follow = streams.answer_stream_follow(answer_id=answer.pk, user=asker, after=0)
    first = asyncio.ensure_future(anext(follow))
    # Replayed and polled once: anything the old log gave it would have reached it by now.
    polled = asyncio.ensure_future(log_reads.reached(2))
    await asyncio.wait({first, polled}, return_when=asyncio.FIRST_COMPLETED)
    if first.done():
        polled.cancel()
    assert not first.done()  # nothing replayed: the old log is not this answer's
    await polled
    await _log(answer, 1, "token", text="mine")  # found at the next poll of the log
    assert (await asyncio.wait_for(first, timeout=30)).event.text == "mine"
    await follow.aclose()


async def test_many_answers_streaming_at_once_each_reach_their_follower_whole(
    corpus, asker, scripted, settings
):
    # More log entries at once than Django's default local-memory cache holds (300).
    settings.ANSWERS = {**settings.ANSWERS, "MAX_CONCURRENT_STREAMS": 20}
    scripted.script = [f"w{n} " for n in range(60)] + ["See [1]."]

    async def ask_and_follow() -> tuple[int, list[streams.StreamEvent]]:
        run = await pipeline.start_answer(user=asker, question=QUESTION)
        await streams.answer_stream_start(run=run)
        follow = streams.answer_stream_follow(answer_id=run.answer.pk, user=asker)
        return run.answer.pk, [event async for event in follow]

    results = await asyncio.gather(*(ask_and_follow() for _ in range(12)))
    for answer_id, events in results:
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        stored = await Answer.objects.aget(pk=answer_id)
        streamed = "".join(e.event.text for e in events if isinstance(e.event, TokenEvent))
        assert stored.status == "complete" and streamed == stored.raw_text


async def test_an_answer_followed_only_where_it_is_generated_sends_nothing_to_the_layer(
    corpus, asker, answer_group_sends
):
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    events = [e async for e in await streams.answer_stream_ask(run=run)]
    assert events[-1].event.type == "done"
    assert answer_group_sends == []


@pytest.mark.skipif(not settings.REDIS_URL, reason="another process can follow only on Redis")
async def test_once_a_follower_elsewhere_says_so_the_events_go_to_the_layer(
    corpus, asker, answer_group_sends, scripted
):
    scripted.script = ["One [1]. ", "Two [1]. ", "Three [1]."]
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    # What a follower in another process does before reading the log.
    await stream_log.stream_mark_followed(stream_log.stream_name(run.answer))
    events = [e async for e in await streams.answer_stream_ask(run=run)]
    sent = [e for message in answer_group_sends for e in stream_log.layer_events(message)]
    assert [e.seq for e in sent] == [e.seq for e in events]


@pytest.mark.skipif(not settings.REDIS_URL, reason="the log is batched only in a shared cache")
async def test_a_log_in_redis_is_written_in_batches_and_replays_every_event(
    corpus, asker, scripted, monkeypatch
):
    cache = stream_log.stream_cache()
    writes: list[int] = []
    set_many = cache.set_many

    def counting(data, *args, **kwargs):  # type: ignore[no-untyped-def]
        writes.append(len(data))
        return set_many(data, *args, **kwargs)

    monkeypatch.setattr(cache, "set_many", counting)
    scripted.script = [f"Word{i} " for i in range(60)] + ["[1]."]
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    events = [e async for e in await streams.answer_stream_ask(run=run)]
    # Fewer writes than events (the provider is fast: whole batches), the last one included.
    assert len(writes) < len(events) / 4
    replayed = await stream_log.log_read(stream_log.stream_name(run.answer), 0, None)
    assert replayed is not None
    assert [e.to_dict() for e in replayed] == [e.to_dict() for e in events]


@pytest.mark.skipif(not settings.REDIS_URL, reason="the stream log is in Redis only there")
async def test_answers_in_flight_share_the_process_redis_connections(settings):
    """Each answer runs in a task of its own; the stream log must not open a Redis
    connection per task (Django's ``caches`` is one instance per task), or a burst of
    answers opens one connection each and pays a connect each."""
    import threading
    import uuid

    import redis

    name = f"answers-test-{uuid.uuid4().hex[:12]}"  # this test's connections, by name
    default = settings.CACHES["default"]
    settings.CACHES = {
        **settings.CACHES,
        "default": {**default, "OPTIONS": {**default.get("OPTIONS", {}), "client_name": name}},
    }
    release = asyncio.Event()
    answers = 30
    ready = [asyncio.Event() for _ in range(answers)]

    async def answer_in_flight(index: int) -> None:
        stream = f"connections-{name}-{index}"
        await stream_log.log_write(stream, [{"seq": 1, "type": "token", "text": "x"}])
        await stream_log.stream_is_followed(stream)
        ready[index].set()
        await release.wait()  # the answer's task lives on, as it does while it streams

    tasks = [asyncio.create_task(answer_in_flight(i)) for i in range(answers)]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), timeout=30)
        client = redis.Redis.from_url(settings.REDIS_URL)
        ours = [c for c in client.client_list() if c.get("name") == name]
        client.close()
    finally:
        release.set()
        await asyncio.gather(*tasks)
    # At most one per thread that talks to Redis at once (asyncio's default executor, about
    # cores + 4): bounded by the process's threads, not by its answers.
    assert 1 <= len(ours) <= threading.active_count() < answers


async def _follow_elsewhere(answer_id: int, user, after: int = 0) -> list[streams.StreamEvent]:  # type: ignore[no-untyped-def]
    return [
        e async for e in streams.answer_stream_follow(answer_id=answer_id, user=user, after=after)
    ]


@pytest.fixture
def as_if_elsewhere(monkeypatch):  # type: ignore[no-untyped-def]
    """Followers in this test see no generation in this process, as a follower in another
    process does: the log and the layer are all they have."""
    from answers.streams import relay

    monkeypatch.setattr(relay, "local_streams", {})


@pytest.mark.skipif(not settings.REDIS_URL, reason="another process can follow only on Redis")
async def test_a_fast_answer_reaches_a_follower_elsewhere_whole_and_in_order_in_batches(
    corpus, asker, scripted, answer_group_sends, as_if_elsewhere
):
    scripted.script = [f"Word{i} " for i in range(200)] + ["[1]."]
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    follower = asyncio.ensure_future(_follow_elsewhere(run.answer.pk, asker))
    stream = stream_log.stream_name(run.answer)
    while not await stream_log.stream_is_followed(stream):  # subscribed before it starts
        await asyncio.sleep(0.01)
    await streams.answer_stream_start(run=run)
    events = await asyncio.wait_for(follower, timeout=30)
    await streams.answer_streams_wait(timeout=10)

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].event.type == "done"
    stored = await Answer.objects.aget(pk=run.answer.pk)
    streamed = "".join(e.event.text for e in events if isinstance(e.event, TokenEvent))
    assert stored.status == "complete" and streamed == stored.raw_text
    # Sent as they were ready: far fewer messages than events (the provider is fast).
    assert len(answer_group_sends) < len(events) / 4
    sent = [e for message in answer_group_sends for e in stream_log.layer_events(message)]
    assert [e.to_dict() for e in sent] == [e.to_dict() for e in events]
    replayed = await stream_log.log_read(stream, 0, None)
    assert replayed is not None and [e.to_dict() for e in replayed] == [e.to_dict() for e in events]


@pytest.mark.skipif(not settings.REDIS_URL, reason="another process can follow only on Redis")
async def test_followers_elsewhere_joining_mid_answer_get_every_event_once(
    corpus, asker, scripted, as_if_elsewhere
):
    scripted.script = [f"Word{i} " for i in range(80)] + ["[1]."]
    scripted.delay = 0.005
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    asked = await streams.answer_stream_ask(run=run)
    seen = [await anext(asked) for _ in range(20)]
    # One from the start, one resuming after what the asker has seen (Last-Event-ID).
    late = await asyncio.gather(
        _follow_elsewhere(run.answer.pk, asker),
        _follow_elsewhere(run.answer.pk, asker, after=seen[-1].seq or 0),
    )
    seen += [e async for e in asked]

    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].event.type == "done"
    whole = [e.to_dict() for e in seen]
    assert [e.to_dict() for e in late[0]] == whole
    assert [e.to_dict() for e in late[1]] == whole[20:]


async def test_a_running_answer_steps_aside_between_events_only_after_its_first_token(
    corpus, asker, scripted, settings, monkeypatch
):
    """New questions first (ADR 0036): a running answer pauses while asks wait for the
    preparing lane, but never before its own first token (that wait is what it saves)."""
    from answers.streams import generation

    settings.ANSWERS = {**settings.ANSWERS, "PREPARING_PAUSE_MS": 100}
    scripted.script = ["One [1]. ", "Two. ", "Three. ", "Four."]
    published: list[str] = []
    paused_before: list[int] = []
    original_publish = generation.Publisher.publish

    async def publish(self, event):  # type: ignore[no-untyped-def]
        published.append(event.type)
        await original_publish(self, event)

    async def step_aside(*, max_wait: float) -> None:
        assert max_wait == 0.1  # PREPARING_PAUSE_MS
        paused_before.append(len(published))

    monkeypatch.setattr(generation.Publisher, "publish", publish)
    monkeypatch.setattr(generation, "step_aside", step_aside)
    asked = await streams.answer_stream_begin(user=asker, question=QUESTION, conversation_id=None)
    events = [e.event.type async for e in asked.events]
    assert events == published
    assert events[:2] == ["references", "token"]
    # Before every event after the first token, and before none of the first two.
    assert paused_before == list(range(2, len(events)))


async def test_an_answer_ends_while_the_lane_stays_full_each_pause_is_bounded(
    corpus, asker, scripted, settings
):
    settings.ANSWERS = {**settings.ANSWERS, "PREPARING_PAUSE_MS": 20}
    scripted.script = ["One [1]. ", "Two. ", "Three."]
    asked = await streams.answer_stream_begin(user=asker, question=QUESTION, conversation_id=None)
    lane = pipeline.preparing_lane()
    release = asyncio.Event()

    async def hold() -> None:
        async with lane.turn():
            await release.wait()

    # Every place taken and one more ask waiting, for as long as the answer runs.
    holders = [asyncio.ensure_future(hold()) for _ in range(lane.capacity + 1)]
    await asyncio.sleep(0)
    assert lane.waiting == 1
    try:
        events = [e.event async for e in asked.events]
    finally:
        release.set()
        await asyncio.gather(*holders)
    assert events[-1].type == "done"
    assert events[-1].answer.text == "One [1]. Two. Three."
