"""The control channel: what other processes tell the answers generated here (ADR 0037).

The Redis tests run in CI's PostgreSQL + Redis pass; the message handling is checked on
its own everywhere."""

from __future__ import annotations

import asyncio
import logging

import pytest
from channels.layers import get_channel_layer
from django.conf import settings

from answers import pipeline, streams
from answers.events import TokenEvent
from answers.models import Answer
from answers.streams import control as stream_control
from answers.streams import log as stream_log
from answers.streams.generation import LocalStream

QUESTION = "What is a lambda expression?"
on_redis = pytest.mark.skipif(
    not settings.REDIS_URL, reason="another process can stop or follow only on Redis"
)


def test_a_message_reaches_the_answer_it_names_and_no_other():
    control = stream_control.Control()
    mine, other = LocalStream(), LocalStream()
    control.attach("1.1", mine)
    control.attach("2.2", other)
    control.dispatch({"type": stream_control.STOP, "stream": "1.1"})
    control.dispatch({"type": stream_control.FOLLOWED, "stream": "2.2"})
    assert mine.stop.is_set() and not mine.followed_elsewhere
    assert other.followed_elsewhere and not other.stop.is_set()


def test_a_message_that_comes_before_its_answer_is_registered_is_kept_for_it():
    control = stream_control.Control()
    control.dispatch({"type": stream_control.FOLLOWED, "stream": "1.1"})
    control.dispatch({"type": stream_control.STOP, "stream": "1.1"})
    local = LocalStream()
    control.attach("1.1", local)
    assert local.stop.is_set() and local.followed_elsewhere
    later = LocalStream()
    control.attach("1.1", later)  # delivered once
    assert not later.stop.is_set()


@pytest.mark.parametrize(
    "message",
    [
        {"type": "answer.wake"},
        {"type": "answer.stop"},
        {"type": "answer.stop", "stream": 7},
        {"type": "answer.unknown", "stream": "1.1"},
        {"stream": "1.1"},
    ],
)
def test_other_messages_are_ignored(message):
    control = stream_control.Control()
    local = LocalStream()
    control.attach("1.1", local)
    control.dispatch(message)
    assert not local.stop.is_set() and not local.followed_elsewhere
    assert control.early == {}


def test_messages_for_answers_that_never_come_here_are_bounded(monkeypatch):
    monkeypatch.setattr(stream_control, "EARLY_LIMIT", 10)
    control = stream_control.Control()
    for n in range(50):
        control.dispatch({"type": stream_control.STOP, "stream": f"{n}.0"})
    assert len(control.early) <= 10
    assert "49.0" in control.early  # the newest are kept


def test_messages_kept_for_a_missing_answer_expire(monkeypatch):
    control = stream_control.Control()
    control.dispatch({"type": stream_control.STOP, "stream": "1.1"})
    clock = stream_control.time.monotonic() + stream_control.EARLY_SECONDS + 1
    monkeypatch.setattr(stream_control.time, "monotonic", lambda: clock)
    control.dispatch({"type": stream_control.STOP, "stream": "2.2"})
    assert set(control.early) == {"2.2"}


# On Redis: real answers, the real layer.


@pytest.fixture
def control_calls(monkeypatch):  # type: ignore[no-untyped-def]
    """The layer's group joins and leaves, and the cache reads of "followed elsewhere"."""
    layer = get_channel_layer()
    calls: list[str] = []
    for name in ("group_add", "group_discard"):
        method = getattr(layer, name)

        async def recording(group, channel, _method=method, _name=name):  # type: ignore[no-untyped-def]
            calls.append(f"{_name} {group}")
            await _method(group, channel)

        monkeypatch.setattr(layer, name, recording)
    from answers.streams import generation

    is_followed = generation.stream_is_followed

    async def reading(stream):  # type: ignore[no-untyped-def]
        calls.append("is_followed")
        return await is_followed(stream)

    monkeypatch.setattr(generation, "stream_is_followed", reading)
    return calls


async def _streaming(asker, scripted, *, words: int, delay: float):  # type: ignore[no-untyped-def]
    """An answer of ``words`` scripted tokens, ``delay`` apart, and its asker's events."""
    scripted.script = [f"w{n} " for n in range(words)] + ["See [1]."]
    scripted.delay = delay
    run = await pipeline.start_answer(user=asker, question=QUESTION)
    return run, await streams.answer_stream_ask(run=run)


@on_redis
@pytest.mark.django_db(transaction=True)
async def test_a_burst_of_answers_shares_one_listener_joined_once(
    corpus, asker, scripted, settings, control_calls
):
    settings.ANSWERS = {**settings.ANSWERS, "MAX_CONCURRENT_STREAMS": 20}
    scripted.script = [f"w{n} " for n in range(20)] + ["See [1]."]
    runs = [await pipeline.start_answer(user=asker, question=QUESTION) for _ in range(10)]
    asked = await asyncio.gather(*(streams.answer_stream_ask(run=run) for run in runs))

    async def drain(events):  # type: ignore[no-untyped-def]
        return [e async for e in events]

    results = await asyncio.gather(*(drain(events) for events in asked))
    assert all(events[-1].event.type == "done" for events in results)
    await streams.answer_streams_wait(timeout=10)
    control = stream_control.control_for_loop()
    assert control.task is None and control.users == 0 and control.targets == {}
    joins = [c for c in control_calls if c.startswith("group_")]
    assert joins == [
        f"group_add {stream_control.CONTROL_GROUP}",
        f"group_discard {stream_control.CONTROL_GROUP}",
    ]
    # The cache is asked twice an answer (first and last batch), not every half second.
    assert control_calls.count("is_followed") <= 2 * len(runs)


@on_redis
@pytest.mark.django_db(transaction=True)
async def test_a_stop_from_another_process_reaches_the_answer(corpus, asker, scripted):
    run, events = await _streaming(asker, scripted, words=400, delay=0.01)
    first = await events.__anext__()
    # What answer_stream_stop sends from a process where the answer is not generated.
    await stream_control.control_send(
        stream=stream_log.stream_name(run.answer), kind=stream_control.STOP
    )
    rest = [e async for e in events]
    assert first.event.type == "references"
    assert rest[-1].event.type == "done"
    stored = await Answer.objects.aget(pk=run.answer.pk)
    assert stored.status == Answer.Status.INTERRUPTED
    assert len([e for e in rest if isinstance(e.event, TokenEvent)]) < 400


@on_redis
@pytest.mark.django_db(transaction=True)
async def test_a_follower_announced_mid_answer_gets_the_next_events_on_the_layer(
    corpus, asker, scripted, control_calls, answer_group_sends
):
    run, events = await _streaming(asker, scripted, words=100, delay=0.01)
    seen = [await events.__anext__() for _ in range(3)]
    # Only the message: the cache says nothing, so only the control channel can tell.
    await stream_control.control_send(
        stream=stream_log.stream_name(run.answer), kind=stream_control.FOLLOWED
    )
    seen += [e async for e in events]
    on_layer = [e.seq for message in answer_group_sends for e in stream_log.layer_events(message)]
    terminal = seen[-1].seq
    assert on_layer and on_layer[-1] == terminal
    # Events went out live before the last one, not only the last word.
    assert len(on_layer) > 10 and on_layer == list(range(on_layer[0], terminal + 1))
    assert control_calls.count("is_followed") <= 2


@on_redis
@pytest.mark.django_db(transaction=True)
async def test_while_the_channel_is_down_answers_ask_the_cache_as_before(
    corpus, asker, scripted, control_calls, monkeypatch
):
    monkeypatch.setattr("answers.streams.generation.FOLLOWED_CHECK_SECONDS", 0.1)
    _, events = await _streaming(asker, scripted, words=60, delay=0.02)
    stream_control.control_for_loop().healthy = False  # as after a failed receive
    assert [e async for e in events][-1].event.type == "done"
    assert control_calls.count("is_followed") > 4  # every 0.1 s over about 1.2 s


@on_redis
@pytest.mark.django_db(transaction=True)
async def test_after_the_layer_fails_under_the_listener_it_joins_again_and_stops_arrive(
    corpus, asker, scripted, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, logger="answers.streams")
    monkeypatch.setattr(stream_control, "RETRY_SECONDS", (0.01, 0.05))
    layer = get_channel_layer()
    receive = layer.receive
    failures = [ConnectionError("Redis went away")]

    async def failing_once(channel):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return await receive(channel)

    monkeypatch.setattr(layer, "receive", failing_once)
    run, events = await _streaming(asker, scripted, words=400, delay=0.01)
    first = await events.__anext__()
    control = stream_control.control_for_loop()
    for _ in range(300):  # failed, waited, joined again
        if "control channel failed" in caplog.text and control.healthy:
            break
        await asyncio.sleep(0.01)
    assert not failures and control.healthy
    assert "control channel failed" in caplog.text
    await stream_control.control_send(
        stream=stream_log.stream_name(run.answer), kind=stream_control.STOP
    )
    rest = [e async for e in events]
    assert first.event.type == "references" and rest[-1].event.type == "done"
    stored = await Answer.objects.aget(pk=run.answer.pk)
    assert stored.status == Answer.Status.INTERRUPTED
