"""Resumable answer streams: generation belongs to the answer, not to the socket that asked.

``answer_stream_start`` runs an answer's pipeline (``AnswerRun.events()``) as a task of
this process. Every event gets a sequence number (1, 2, ...), is appended to the answer's
*log* in the cache (``ANSWERS["STREAM_CACHE"]``, kept ``STREAM_LOG_TTL`` seconds) and only
then published to the answer's group on the channel layer. Because the log is written
first, a follower that subscribes and *then* reads the log misses nothing:

    follow(after=n): join the group → replay the log after n → relay live events,
                     skipping any already replayed, filling gaps from the log.

Any process sharing the cache and the layer (Redis, docs/deployment.md) can follow any
answer; with the in-memory layer and cache, every process only its own. A follower that
hears nothing for ``STREAM_POLL_INTERVAL`` seconds re-reads the log and then the database,
so a message the layer dropped (over capacity) or a generating process that died cannot
leave it waiting for ever. When the log has expired, a finished answer is delivered as
its stored result. ``stop`` reaches the generating process through the layer too.

The order of events is the pipeline's; this module only numbers, stores and relays them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.core.cache import BaseCache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.utils import timezone

from . import pipeline, presenters, selectors, services
from .conf import answers_settings
from .events import DoneEvent, ErrorEvent, Event, StreamEvent
from .models import Answer

logger = logging.getLogger(__name__)

ABANDONED_MESSAGE = "The answer was interrupted before it finished. Please ask again."

# Generations running in this process, by answer id (a strong reference keeps each task
# alive after the socket that asked has gone).
_running: dict[int, asyncio.Task[None]] = {}


class _LocalStream:
    """An answer being generated in this process: the events published so far and a queue
    per follower in this process. Followers here get each event from the publisher
    directly (no layer round trip, no polling); the layer carries only what a follower
    in another process needs."""

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.queues: set[asyncio.Queue[StreamEvent | None]] = set()
        self.ended = False
        # Set by a stop asked in this process (one from elsewhere comes over the layer).
        self.stop = asyncio.Event()
        self.stop_reason = ""

    def add(self, event: StreamEvent) -> None:
        self.events.append(event)
        for queue in self.queues:
            queue.put_nowait(event)

    def end(self) -> None:
        """No more events (normally after the terminal one): wake every follower."""
        self.ended = True
        for queue in self.queues:
            queue.put_nowait(None)


# Answers generated here, by stream name, until their generation ends.
_local: dict[str, _LocalStream] = {}
# Set when this process is shutting down (answer_streams_drain): no new questions.
_draining = False
DRAINING_MESSAGE = "This server is restarting. Please ask again in a moment."
DRAINING_RETRY_AFTER = 2


def _layer_is_shared() -> bool:
    """Whether another process can follow or stop an answer through the layer (Redis):
    with the in-memory layer, none can, and publishing to it would only cost."""
    return not isinstance(_layer(), InMemoryChannelLayer)


class AnswerNotFound(pipeline.AskRefused):
    """No such answer, or not the caller's: the same message either way."""

    code = "not_found"


class AnswerNotStreaming(pipeline.AskRefused):
    """Stop asked of an answer that is no longer being generated."""

    code = "not_streaming"

    def __init__(self, message: str, *, answer: Answer) -> None:
        super().__init__(message)
        self.answer = answer


class StreamUnavailable(pipeline.AskRefused):
    """The channel layer (Redis) cannot be reached: the answer cannot be streamed."""

    code = "unavailable"


class ServerDraining(StreamUnavailable):
    """This process is shutting down: asked again, another one (or this one restarted)
    will answer. Refused before anything is stored."""


def answer_streams_check_accepting() -> None:
    """Raise ``ServerDraining`` once this process has begun shutting down."""
    if _draining:
        raise ServerDraining(DRAINING_MESSAGE, retry_after=DRAINING_RETRY_AFTER)


def _stream_name(answer: Answer) -> str:
    """The answer's id and its creation to the microsecond: a database restored or
    recreated reuses ids, and must not meet the logs and groups of the old answers."""
    return f"{answer.pk}.{int(answer.created_at.timestamp() * 1_000_000)}"


def _group(stream: str) -> str:
    return f"answers.answer.{stream}"


def _control_group(stream: str) -> str:
    return f"answers.control.{stream}"


def _log_key(stream: str, part: int | str) -> str:
    return f"answers:stream:{stream}:{part}"


def _layer() -> BaseChannelLayer:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("Resumable answer streams need CHANNEL_LAYERS (docs/deployment.md).")
    return layer


def _cache() -> BaseCache:
    return caches[str(answers_settings.STREAM_CACHE)]


# The cache's own async methods run on the one thread Django's ORM shares; the log must
# not queue behind database work, and both the Redis and the local-memory cache are
# thread-safe.
def _log_write_sync(stream: str, entry: dict[str, Any]) -> None:
    _cache().set_many(
        {_log_key(stream, entry["seq"]): entry, _log_key(stream, "last"): entry["seq"]},
        timeout=int(answers_settings.STREAM_LOG_TTL),
    )


def _log_read_sync(stream: str, after: int, upto: int | None) -> list[StreamEvent] | None:
    """Logged events after ``after`` (up to ``upto``); None when the log is gone."""
    cache = _cache()
    last = cache.get(_log_key(stream, "last"))
    if last is None:
        return None
    end = int(last) if upto is None else min(int(last), upto)
    keys = [_log_key(stream, seq) for seq in range(after + 1, end + 1)]
    found = cache.get_many(keys) if keys else {}
    if len(found) != len(keys):
        return None  # partly evicted: only the stored result is whole
    return [StreamEvent.from_dict(found[key]) for key in keys]


_log_write_elsewhere = sync_to_async(_log_write_sync, thread_sensitive=False)
_log_read_elsewhere = sync_to_async(_log_read_sync, thread_sensitive=False)


def _log_is_local() -> bool:
    # A local-memory cache answers in microseconds: a thread hop would cost ten times more.
    return isinstance(_cache(), LocMemCache)


async def _log_write(stream: str, entry: dict[str, Any]) -> None:
    if _log_is_local():
        _log_write_sync(stream, entry)
    else:
        await _log_write_elsewhere(stream, entry)


async def _log_read(stream: str, after: int, upto: int | None) -> list[StreamEvent] | None:
    if _log_is_local():
        return _log_read_sync(stream, after, upto)
    return await _log_read_elsewhere(stream, after, upto)


class _Publisher:
    def __init__(self, stream: str, local: _LocalStream) -> None:
        self.stream = stream
        self.local = local
        self.shared = _layer_is_shared()
        self.seq = 0
        self.finished = False
        # Set with the cancel: a cancel that lands in a sync_to_async call is swallowed
        # (asgiref waits for the thread and returns its result), so the loop checks too.
        self.stopping = False

    async def publish(self, event: Event) -> None:
        self.seq += 1
        numbered = StreamEvent(seq=self.seq, event=event)
        # Written as a dict where it leaves the process: the log and the layer outlive
        # this code version (a rolling deploy) and Redis carries msgpack.
        entry = numbered.to_dict()
        await _log_write(self.stream, entry)
        self.local.add(numbered)
        if self.shared:
            message = {"type": "answer.event", "event": entry}
            await _layer().group_send(_group(self.stream), message)
        self.finished = numbered.terminal


async def answer_stream_start(*, run: pipeline.AnswerRun) -> None:
    """Generate ``run``'s answer in this process, whoever follows it (or nobody)."""
    answer_id = run.answer.pk
    stream = _stream_name(run.answer)
    control: str | None = None
    try:
        layer = _layer()
        if _layer_is_shared():
            # Listening for a "stop" from another process before returning: a stop sent
            # right after the ask is not lost.
            control = await layer.new_channel()
            await layer.group_add(_control_group(stream), control)
    except Exception:
        logger.exception("The stream of answer %s could not start", answer_id)
        await run.fail("the channel layer could not be reached")
        raise StreamUnavailable(
            "Answers cannot be streamed right now. Please try again shortly."
        ) from None
    local = _local[stream] = _LocalStream()
    # A fresh context: the task must not inherit the request's (Django runs each request's
    # thread-sensitive work on an executor that ends with the request).
    task = asyncio.create_task(
        _generate(run, control, local), name=f"answer-{answer_id}", context=contextvars.Context()
    )
    _running[answer_id] = task

    def _ended(_: asyncio.Task[None]) -> None:
        _running.pop(answer_id, None)
        _local.pop(stream, None)
        local.end()

    task.add_done_callback(_ended)


_WAKE = {"type": "answer.wake"}


async def _end_receive(
    layer: BaseChannelLayer, channel: str, pending: asyncio.Future[Any] | None
) -> None:
    """End a receive still waiting on ``channel`` with a message of its own, not a
    cancel: channels-redis lets a cancelled receive go only when its blocking pop times
    out (5 s), which would hold up whoever awaits it."""
    if pending is None or pending.done():
        return
    with contextlib.suppress(Exception):
        await layer.send(channel, _WAKE)
        await asyncio.wait({pending}, timeout=1.0)
    if not pending.done():
        pending.cancel()
    # Retrieved, so that an error of the last read is not logged as never retrieved.
    pending.add_done_callback(lambda f: f.cancelled() or f.exception())


async def _generate(run: pipeline.AnswerRun, control: str | None, local: _LocalStream) -> None:
    answer_id = run.answer.pk
    stream = _stream_name(run.answer)
    publisher = _Publisher(stream, local)
    layer = _layer()
    produce = asyncio.create_task(_produce(run, publisher))
    stop_here = asyncio.ensure_future(local.stop.wait())
    stop_there = asyncio.ensure_future(layer.receive(control)) if control else None
    waiting = {produce, stop_here} | ({stop_there} if stop_there else set())
    try:
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        lost = stop_there is not None and stop_there in done and not produce.done()
        if lost and stop_there is not None and stop_there.exception() is not None:
            # The layer failed under the listener: only a stop from this process works now.
            logger.warning("Answer %s lost its stop channel: %r", answer_id, stop_there.exception())
            await asyncio.wait({produce, stop_here}, return_when=asyncio.FIRST_COMPLETED)
        if not produce.done():
            # Stopped: the pipeline stores the partial answer as interrupted on the way out.
            if local.stop_reason:
                run.stop_reason = local.stop_reason
            publisher.stopping = True
            produce.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await produce
            if not publisher.finished:
                await publisher.publish(await run.stopped())
    except Exception:
        logger.exception("Publishing answer %s failed", answer_id)
    finally:
        if not produce.done():  # this task itself was cancelled (shutdown)
            produce.cancel()
        stop_here.cancel()
        if control is not None:
            await _end_receive(layer, control, stop_there)
            with contextlib.suppress(Exception):
                await layer.group_discard(_control_group(stream), control)


async def _produce(run: pipeline.AnswerRun, publisher: _Publisher) -> None:
    window = int(answers_settings.STREAM_COALESCE_MS) / 1000
    try:
        # Closed explicitly: a stop that lands while an event is being published must
        # still run the pipeline's clean-up (store the partial answer) now, not at GC.
        events = run.events()
        async with (
            aclosing(events),
            aclosing(pipeline.coalesced(events, window=window)) as stream,
        ):
            async for event in stream:
                if publisher.stopping:
                    break  # closing the pipeline stores the partial answer as interrupted
                await publisher.publish(event)
    except asyncio.CancelledError:
        raise
    except Exception:
        # A bug, not a provider failure (the pipeline turns those into an error event):
        # followers still get a last word.
        logger.exception("Generating answer %s failed", run.answer.pk)
        if not publisher.finished:
            await publisher.publish(
                ErrorEvent(
                    pipeline.GENERIC_ERROR, answer_id=run.answer.pk, code="generation_failed"
                )
            )


async def answer_stream_stop(*, answer_id: int, user: Any) -> None:
    """Ask whichever process generates the owner's ``answer_id`` to stop; its followers
    get its ``done``."""
    answer = await sync_to_async(_answer_for_follower)(answer_id, user)
    if answer.status != Answer.Status.STREAMING:
        raise AnswerNotStreaming("The answer is not being generated.", answer=answer)
    local = _local.get(_stream_name(answer))
    if local is not None:
        local.stop.set()  # generated here
    elif _layer_is_shared():
        await _layer().group_send(_control_group(_stream_name(answer)), {"type": "answer.stop"})


async def answer_streams_drain(*, grace: float) -> None:
    """Shut down this process's streams: take no new questions, let the running answers
    finish for up to ``grace`` seconds, then stop the rest, which stores each as
    interrupted with its partial text and finalized citations. Followers here get that
    last word; followers elsewhere get it from the log or the database."""
    global _draining
    _draining = True
    loop = asyncio.get_running_loop()
    tasks = [t for t in _running.values() if not t.done() and t.get_loop() is loop]
    streams = list(_local.values())
    logger.info("Shutting down: %d answer(s) running, %.0f s to finish", len(tasks), grace)
    _, late = await asyncio.wait(tasks, timeout=grace) if tasks else (set(), set())
    if late:
        logger.warning("Shutting down: stopping %d answer(s) still running", len(late))
        for local in streams:
            local.stop_reason = "stopped: the server shut down"
            local.stop.set()  # the same path as a user's stop
        _, stuck = await asyncio.wait(late, timeout=5.0)
        for task in stuck:
            task.cancel()
    # Followers here were woken with the last word: let them send it before the loop
    # stops (a follower left waiting would be collected with a dead loop).
    deadline = loop.time() + 2.0
    while any(local.queues for local in streams) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    # And the server's own cancellations (daphne cancels every connection's consumer as
    # it stops) a few turns of the loop to finish: a consumer still waiting for its next
    # message when the loop goes is collected with it, which crashed the interpreter
    # (SIGSEGV, exit -11) on CPython 3.11.
    for _ in range(5):
        await asyncio.sleep(0.01)


def answer_streams_drain_on_shutdown() -> bool:
    """Under daphne, run ``answer_streams_drain`` (``SHUTDOWN_GRACE``) when the server is
    told to stop (SIGTERM, SIGINT), before it stops: call it from the ASGI module. False
    (nothing done) under a server that is not Twisted's; there, call the drain from its
    own shutdown hook (an ASGI lifespan ``shutdown``)."""
    import sys

    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import defer
    from twisted.internet import reactor as installed

    def drain() -> defer.Deferred[None]:
        grace = float(answers_settings.SHUTDOWN_GRACE)
        return defer.Deferred.fromFuture(asyncio.ensure_future(answer_streams_drain(grace=grace)))

    reactor: Any = installed  # an IReactorCore (zope interfaces type badly)
    reactor.addSystemEventTrigger("before", "shutdown", drain)
    return True


async def answer_streams_wait(timeout: float | None = None) -> None:
    """Wait for this process's generations to end (shutdown, tests)."""
    loop = asyncio.get_running_loop()
    tasks = [t for t in _running.values() if not t.done() and t.get_loop() is loop]
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)


def _answer_for_follower(answer_id: int, user: Any) -> Answer:
    try:
        return selectors.answer_get_for_user(answer_id=answer_id, user=user)
    except selectors.NotFound:
        raise AnswerNotFound("answer not found") from None


def _settled_sync(answer_id: int, user: Any) -> Event | None:
    answer = _answer_for_follower(answer_id, user)
    if answer.status == Answer.Status.STREAMING:
        if not services.answer_is_abandoned(answer=answer, now=timezone.now()):
            return None
        return ErrorEvent(ABANDONED_MESSAGE, answer_id=answer_id, code="interrupted")
    # The answer just loaded, not a second lookup.
    return DoneEvent(answer=presenters.answer_payload(answer=answer, user=user))


def _withheld_sync(answer: Answer, user: Any) -> StreamEvent | None:
    """The stored result of an answer withheld from ``user`` (presenters.answer_payload),
    whatever its status; None when they may read it."""
    if not selectors.answer_is_withheld(answer=answer, user=user):
        return None
    return StreamEvent(
        seq=None, event=DoneEvent(answer=presenters.answer_payload(answer=answer, user=user))
    )


async def _settled(answer_id: int, user: Any) -> StreamEvent | None:
    """The stored outcome, when the database says the answer is over (None: still going)."""
    event = await sync_to_async(_settled_sync)(answer_id, user)
    if event is None:
        return None
    return StreamEvent(seq=None, event=event)


@dataclass(frozen=True)
class AskedStream:
    """A question being answered: its answer's id, and the asker's stream of its events."""

    answer_id: int
    events: AsyncGenerator[StreamEvent, None]


async def answer_stream_begin(
    *, user: Any, question: object, conversation_id: uuid.UUID | None
) -> AskedStream:
    """The one way a transport asks for a streamed answer: refused before anything is
    stored while this process shuts down; otherwise the question is stored
    (``pipeline.start_answer``, which raises its own refusals) and generated here."""
    answer_streams_check_accepting()
    run = await pipeline.start_answer(user=user, question=question, conversation_id=conversation_id)
    return AskedStream(answer_id=run.answer.pk, events=await answer_stream_ask(run=run))


async def answer_stream_ask(*, run: pipeline.AnswerRun) -> AsyncGenerator[StreamEvent, None]:
    """Start generating ``run``'s answer and return the asker's follower of it.

    Generated in this process, so the asker follows it here, from its first event, with
    neither the layer, the log nor the database (``answer_stream_follow`` is for everyone
    else). Raises ``StreamUnavailable`` (the answer stored as failed) when the layer is
    down."""
    await answer_stream_start(run=run)
    local = _local.get(_stream_name(run.answer))
    if local is None:  # already over (it cannot be, but the stored result would do)
        return _stored(answer_id=run.answer.pk, user=run.user)
    return _follow_here(local, answer_id=run.answer.pk, user=run.user, after=0)


async def _stored(*, answer_id: int, user: Any) -> AsyncGenerator[StreamEvent, None]:
    settled = await _settled(answer_id, user)
    yield settled or StreamEvent(
        seq=None, event=ErrorEvent(ABANDONED_MESSAGE, answer_id=answer_id, code="interrupted")
    )


async def _follow_here(
    local: _LocalStream, *, answer_id: int, user: Any, after: int
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
        while not (local.ended and queue.empty()):
            item = await queue.get()
            if item is None:
                break
            if item.seq is None or item.seq <= last:
                continue
            yield item
            last = item.seq
            if item.terminal:
                return
        # The generation ended without a last word (this process is shutting down):
        # whatever the database says now.
        async with aclosing(_stored(answer_id=answer_id, user=user)) as stored:
            async for event in stored:
                yield event
    finally:
        local.queues.discard(queue)


async def answer_stream_follow(
    *, answer_id: int, user: Any, after: int = 0
) -> AsyncGenerator[StreamEvent, None]:
    """Every event of ``answer_id``'s stream after sequence number ``after``, live, ending
    with its ``done`` or ``error``. Only the answer's owner may follow it."""
    # Refused before subscribing.
    answer = await sync_to_async(_answer_for_follower)(answer_id, user)
    withheld = await sync_to_async(_withheld_sync)(answer, user)
    if withheld is not None:
        # The log holds the text as it was streamed: the follower gets only the notice.
        yield withheld
        return
    stream = _stream_name(answer)
    local = _local.get(stream)
    if local is not None:
        events = _follow_here(local, answer_id=answer_id, user=user, after=after)
    else:
        layer = _layer()
        channel = await layer.new_channel()
        await layer.group_add(_group(stream), channel)
        events = _relay(layer, channel, stream, answer_id=answer_id, user=user, after=after)
    async with aclosing(events):
        async for event in events:
            yield event


async def _relay(
    layer: BaseChannelLayer,
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
            replayed = await _log_read(stream, last, None)
            if replayed is None:
                # No log: finished long ago (expired), or generated without one (JSON API).
                settled = await _settled(answer_id, user)
                if settled is not None:
                    yield settled
                    return
            for event in replayed or []:
                yield event
                last = event.seq or last
                if event.terminal:
                    return
        while True:
            # One receive kept across quiet spells (never cancelled per poll, see
            # _end_receive).
            if pending is None:
                pending = asyncio.ensure_future(layer.receive(channel))
            done, _ = await asyncio.wait({pending}, timeout=poll)
            if not done:
                fresh = await _log_read(stream, last, None)
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
            if message.get("type") != "answer.event":
                continue
            event = StreamEvent.from_dict(message["event"])
            assert event.seq is not None
            if event.seq <= last:
                continue
            if event.seq > last + 1:
                # The layer dropped something (over capacity): the log has it.
                missed = await _log_read(stream, last, event.seq - 1) or []
                if len(missed) != event.seq - 1 - last:
                    settled = await _settled(answer_id, user)
                    if settled is not None:
                        yield settled
                        return
                for earlier in missed:
                    yield earlier
                    last = earlier.seq or last
            yield event
            last = event.seq
            if event.terminal:
                return
    finally:
        await _end_receive(layer, channel, pending)
        with contextlib.suppress(Exception):
            await layer.group_discard(_group(stream), channel)
