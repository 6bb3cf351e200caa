"""Following: the events of an answer after a sequence number, from the generation itself
when it runs in this process, else from the log and the channel layer, else from the
store (ADR 0008)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer
from django.utils import timezone

from .. import pipeline, selectors, services
from ..conf import answers_settings
from ..events import DoneEvent, ErrorEvent, Event, StreamEvent
from ..models import Answer
from .control import stream_announce_follower
from .generation import LocalStream, local_streams
from .log import (
    answer_group,
    end_receive,
    layer,
    layer_events,
    log_read,
    stream_name,
)
from .refusals import (
    ABANDONED_MESSAGE,
    UNAVAILABLE_MESSAGE,
    StreamUnavailable,
    answer_for_follower,
)

logger = logging.getLogger("answers.streams")


def _settled_sync(answer_id: int, user: Any) -> Event | None:
    try:
        answer = answer_for_follower(answer_id, user)
        if answer.status == Answer.Status.STREAMING:
            if not services.answer_is_abandoned(answer=answer, now=timezone.now()):
                return None
            return ErrorEvent(ABANDONED_MESSAGE, answer_id=answer_id, code="interrupted")
        # The answer just loaded, not a second lookup.
        return pipeline.stored_done_event(answer=answer, user=user)
    finally:
        pipeline.release_connection()  # a follower still waiting holds none


def _withheld_sync(answer: Answer, user: Any) -> StreamEvent | None:
    """The stored result of an answer withheld from ``user`` (presenters.answer_payload),
    whatever its status; None when they may read it."""
    if not selectors.answer_is_withheld(answer=answer, user=user):
        return None
    return StreamEvent(seq=None, event=pipeline.stored_done_event(answer=answer, user=user))


def _follower_check_sync(answer_id: int, user: Any) -> tuple[Answer, StreamEvent | None]:
    """The answer ``user`` may follow, and its stored result if it is withheld from them;
    then the thread's connection goes back, since a follower waits on events, not rows."""
    try:
        answer = answer_for_follower(answer_id, user)
        return answer, _withheld_sync(answer, user)
    finally:
        pipeline.release_connection()


async def _settled(answer_id: int, user: Any) -> StreamEvent | None:
    """The stored outcome, when the database says the answer is over (None: still going)."""
    event = await sync_to_async(_settled_sync)(answer_id, user)
    if event is None:
        return None
    return StreamEvent(seq=None, event=event)


async def _settled_in_the_end(answer_id: int, user: Any, *, poll: float) -> StreamEvent:
    """The stored outcome, waited for: every ``poll`` seconds until the answer is over (an
    answer whose process died ends as abandoned, so this ends too)."""
    while (settled := await _settled(answer_id, user)) is None:
        await asyncio.sleep(poll)
    return settled


async def _as_shown_now(event: StreamEvent, *, answer_id: int, user: Any) -> StreamEvent:
    """A logged event replayed to a follower who came late: a ``done`` is read from the
    store instead, so its Sources show each document as it stands now (removed, changed,
    or no longer the viewer's), as the JSON answer and the page do; same sequence number."""
    if not isinstance(event.event, DoneEvent):
        return event
    return StreamEvent(
        seq=event.seq, event=await pipeline.stored_done(answer_id=answer_id, user=user)
    )


async def stored(*, answer_id: int, user: Any) -> AsyncGenerator[StreamEvent, None]:
    settled = await _settled(answer_id, user)
    yield settled or StreamEvent(
        seq=None, event=ErrorEvent(ABANDONED_MESSAGE, answer_id=answer_id, code="interrupted")
    )


async def follow_here(
    local: LocalStream, *, answer_id: int, user: Any, after: int
) -> AsyncGenerator[StreamEvent, None]:
    """The events after ``after`` of an answer generated in this process: those published
    so far, then each one as it is published."""
    queue: asyncio.Queue[StreamEvent | None] = asyncio.Queue()
    local.queues.add(queue)  # before reading what is there: nothing falls in between
    last = after
    try:
        for event in list(local.events):
            if event.seq is not None and event.seq > last:
                yield event
                last = event.seq
                if event.terminal:
                    return
            elif event.terminal and event.seq == after:
                return  # the client has the `done` already: nothing more, not a second one
        while not (local.ended and queue.empty()):
            item = await queue.get()
            if item is None:
                break
            if item.seq is None or item.seq <= last:
                if item.terminal and item.seq == after:
                    return
                continue
            yield item
            last = item.seq
            if item.terminal:
                return
        # The generation ended without a last word (this process is shutting down):
        # whatever the database says now.
        async with aclosing(stored(answer_id=answer_id, user=user)) as last_word:
            async for event in last_word:
                yield event
    finally:
        local.queues.discard(queue)


async def answer_stream_open(
    *, answer_id: int, user: Any, after: int = 0
) -> AsyncGenerator[StreamEvent, None]:
    """``answer_stream_follow``'s events, with its refusals raised now, before any event:
    not the owner's (``AnswerNotFound``), or the channel layer unreachable
    (``StreamUnavailable``). A transport that answers with a status (SSE) opens here."""
    answer, withheld = await sync_to_async(_follower_check_sync)(answer_id, user)
    if withheld is not None:
        # The log holds the text as it was streamed: the follower gets only the notice.
        return _only(withheld)
    stream = stream_name(answer)
    local = local_streams.get(stream)
    if local is not None:
        return follow_here(local, answer_id=answer_id, user=user, after=after)
    channel_layer = layer()
    channel = await channel_layer.new_channel()
    try:
        await channel_layer.group_add(answer_group(stream), channel)
        # Subscribed, then said so, then the log is read: whatever the generating process
        # publishes before it hears of this follower is in the log.
        await stream_announce_follower(stream)
    except Exception:
        logger.exception("Following answer %s: the channel layer could not be reached", answer_id)
        with contextlib.suppress(Exception):
            await channel_layer.group_discard(answer_group(stream), channel)
        raise StreamUnavailable(UNAVAILABLE_MESSAGE) from None
    return _relay(channel_layer, channel, stream, answer_id=answer_id, user=user, after=after)


async def _only(event: StreamEvent) -> AsyncGenerator[StreamEvent, None]:
    yield event


async def answer_stream_follow(
    *, answer_id: int, user: Any, after: int = 0
) -> AsyncGenerator[StreamEvent, None]:
    """Every event of ``answer_id``'s stream after sequence number ``after``, live, ending
    with its ``done`` or ``error``. Only the answer's owner may follow it. Refusals
    (``pipeline.AskRefused``) are raised from the iteration, before or between events."""
    events = await answer_stream_open(answer_id=answer_id, user=user, after=after)
    async with aclosing(events):
        async for event in events:
            yield event


async def _rest_of_a_finished(
    stream: str, *, answer_id: int, user: Any, after: int
) -> list[StreamEvent] | None:
    """What a follower at ``after`` with nothing left to replay still gets when the answer
    is over (nothing, when ``after`` is its logged ``done``); None while it goes on."""
    settled = await _settled(answer_id, user)
    if settled is None:
        return None
    # Over now: the log holds all it ever will (it may have grown since the replay).
    logged = await log_read(stream, max(after - 1, 0), None)
    if logged is None:
        return [settled]  # expired meanwhile
    rest = [event for event in logged if event.seq is not None and event.seq > after]
    if rest and rest[-1].terminal:
        if isinstance(rest[-1].event, DoneEvent):
            # As _as_shown_now, from the store's `done` just read (not a second read).
            rest[-1] = StreamEvent(seq=rest[-1].seq, event=settled.event)
        return rest
    if not rest and logged and logged[0].seq == after and logged[0].terminal:
        return []  # the client has the `done` already
    # The log ends without a last word (its process died), or `after` is past anything
    # logged: the stored result, so the client loses nothing.
    return [*rest, settled]


async def _relay(
    channel_layer: BaseChannelLayer,
    channel: str,
    stream: str,
    *,
    answer_id: int,
    user: Any,
    after: int,
    replay: bool = True,
) -> AsyncGenerator[StreamEvent, None]:
    """The events of ``stream`` after ``after`` for a follower subscribed on ``channel``:
    the log first (``replay``), then live ones; leaves the group at the end."""
    last = after
    poll = float(answers_settings.STREAM_POLL_INTERVAL)
    pending: asyncio.Future[Any] | None = None
    try:
        if replay:
            replayed = await log_read(stream, last, None)
            if replayed is None:
                # No log: finished long ago (expired), or never begun here.
                settled = await _settled(answer_id, user)
                if settled is not None:
                    yield settled
                    return
            if replayed == []:
                # Nothing after `after` yet: when the answer is over, nothing will come live
                # either, and waiting a poll for it would end in a second `done`.
                rest = await _rest_of_a_finished(
                    stream, answer_id=answer_id, user=user, after=after
                )
                if rest is not None:
                    for event in rest:
                        yield event
                    return
            for event in replayed or []:
                if event.terminal:
                    yield await _as_shown_now(event, answer_id=answer_id, user=user)
                    return
                yield event
                last = event.seq or last
        while True:
            # One receive kept across quiet spells (never cancelled per poll, see
            # _end_receive).
            if pending is None:
                pending = asyncio.ensure_future(channel_layer.receive(channel))
            done, _ = await asyncio.wait({pending}, timeout=poll)
            if not done:
                fresh = await log_read(stream, last, None)
                if fresh:
                    for event in fresh:
                        yield event
                        last = event.seq or last
                        if event.terminal:
                            return
                    continue
                settled = await _settled(answer_id, user)
                if settled is not None:
                    yield settled
                    return
                continue
            message, pending = pending.result(), None
            # One message may carry several consecutive events (none for a wake-up).
            for event in layer_events(message):
                assert event.seq is not None
                if event.seq <= last:
                    continue
                if event.seq > last + 1:
                    # The layer dropped something (over capacity): the log has it.
                    missed = await log_read(stream, last, event.seq - 1) or []
                    if len(missed) != event.seq - 1 - last:
                        # Part of the log is gone too (evicted before its time): never
                        # pass the gap. The stored result, once the answer is over, holds
                        # everything the follower missed.
                        yield await _settled_in_the_end(answer_id, user, poll=poll)
                        return
                    for earlier in missed:
                        yield earlier
                        last = earlier.seq or last
                yield event
                last = event.seq
                if event.terminal:
                    return
    except pipeline.AskRefused:
        raise
    except Exception:
        # Redis (the layer or the log) gone mid-stream: the follower is told, and may
        # resume from its last ``seq`` once it is back, rather than wait on a dead read.
        logger.exception("Following answer %s failed", answer_id)
        raise StreamUnavailable(UNAVAILABLE_MESSAGE) from None
    finally:
        await end_receive(channel_layer, channel, pending)
        with contextlib.suppress(Exception):
            await channel_layer.group_discard(answer_group(stream), channel)
