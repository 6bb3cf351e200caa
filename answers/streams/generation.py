"""Generation and stop: each answer runs as a task of the process that took the question,
publishing every event to its log, to its followers in this process, and (when another
process could follow it) to the channel layer; stopped by its owner or by a shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import time
from contextlib import aclosing
from typing import Any

from asgiref.sync import sync_to_async

from .. import pipeline
from ..conf import answers_settings
from ..events import ErrorEvent, Event, StreamEvent, TokenEvent
from ..lane import lane_of_loop, step_aside
from ..models import Answer
from .control import STOP, Control, control_for_loop, control_send
from .log import (
    layer,
    layer_is_shared,
    layer_publish,
    log_is_local,
    log_write,
    stream_is_followed,
    stream_name,
)
from .refusals import (
    BUSY_MESSAGE,
    BUSY_RETRY_AFTER,
    DRAINING_MESSAGE,
    DRAINING_RETRY_AFTER,
    UNAVAILABLE_MESSAGE,
    AnswerNotStreaming,
    ServerBusy,
    ServerDraining,
    StreamUnavailable,
    answer_for_follower,
)

logger = logging.getLogger("answers.streams")

# How often a generation with no follower elsewhere asks whether one has come (a
# follower that comes in between reads those events from the log).
FOLLOWED_CHECK_SECONDS = 0.5
# A log in Redis is written in batches: at most this many events or this long after the
# oldest unwritten one, and always before an event goes to the layer and with the last
# one (so a follower's gap check and a late replay find what they need).
LOG_BATCH_EVENTS = 32
LOG_BATCH_SECONDS = 0.2
# At most this many events wait for the flusher (Redis slower than the generation): then
# the generation waits for them to go out.
MAX_UNSENT_EVENTS = 256

# Generations running in this process, by answer id (a strong reference keeps each task
# alive after the socket that asked has gone).
running: dict[int, asyncio.Task[None]] = {}


class LocalStream:
    """An answer being generated in this process: the events published so far and a queue
    per follower in this process. Followers here get each event from the publisher
    directly (no layer round trip, no polling); the layer carries only what a follower
    in another process needs."""

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.queues: set[asyncio.Queue[StreamEvent | None]] = set()
        self.ended = False
        # Set by a stop asked here or elsewhere (that one through the control channel).
        self.stop = asyncio.Event()
        self.stop_reason = ""
        # Set once a follower in another process says it listens (the control channel,
        # or the cache when the publisher asks it); from then on every event goes to the layer.
        self.followed_elsewhere = False

    def on_stop(self) -> None:
        self.stop.set()

    def on_followed(self) -> None:
        self.followed_elsewhere = True

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
local_streams: dict[str, LocalStream] = {}
# Set when this process is shutting down (answer_streams_drain): no new questions.
draining = False


def answer_streams_check_accepting() -> None:
    """Raise ``ServerDraining`` once this process has begun shutting down, ``ServerBusy``
    while it generates or prepares ``MAX_PROCESS_STREAMS`` answers (the asker's own
    preparation not counted)."""
    if draining:
        raise ServerDraining(DRAINING_MESSAGE, retry_after=DRAINING_RETRY_AFTER)
    lane = lane_of_loop()
    preparing = lane.others() if lane is not None else 0
    if len(running) + preparing >= int(answers_settings.MAX_PROCESS_STREAMS):
        raise ServerBusy(BUSY_MESSAGE, retry_after=BUSY_RETRY_AFTER)


class Publisher:
    """Numbers an answer's events and publishes them: to the followers in this process at
    once, and to the log and the layer in batches, so that one round trip carries every
    event that became ready while the last one was under way.

    With a log in local memory and no layer another process reaches, each event is
    logged inline (microseconds). Otherwise a flusher task sends what has queued up: the
    log write and the group send of one batch are issued together, and the next batch
    waits for both, so a follower elsewhere that misses a message finds its events in the
    log before the next message is sent (all its gap check needs). A fast generation
    fills batches while a slow one sends each event alone, as soon as it comes: batching
    costs no latency. The last event reaches the followers here only once it is logged
    (a client that reconnects after it finds the whole log)."""

    def __init__(self, stream: str, local: LocalStream, control: Control | None) -> None:
        self.stream = stream
        self.local = local
        self.control = control
        self.shared = layer_is_shared()
        self.seq = 0
        self.finished = False
        # Set with the cancel: a cancel that lands in a sync_to_async call is swallowed
        # (asgiref waits for the thread and returns its result), so the loop checks too.
        self.stopping = False
        # When the cache was last asked whether a follower elsewhere listens (the answer
        # is then marked: LocalStream.followed_elsewhere).
        self.asked_at = -math.inf
        self.inline = log_is_local() and not self.shared
        # Events published but not yet flushed (event, its dict), and events flushed but
        # not yet in the log; when the oldest event not in the log was published.
        self.unsent: list[tuple[StreamEvent, dict[str, Any]]] = []
        self.unlogged: list[dict[str, Any]] = []
        self.unlogged_since = 0.0
        self.log_in_memory = log_is_local()
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.flusher: asyncio.Task[None] | None = None
        self.failure: Exception | None = None

    async def _publish_to_layer(self, *, terminal: bool) -> bool:
        """Whether this batch goes to the layer: once a follower elsewhere has said so.
        It says so in the cache and to this process's control channel: the cache is read
        with the first batch and the last (a follower that came before the generation was
        registered here, or whose message is still on its way), the channel tells in
        between; while the channel is down, the cache is read every
        FOLLOWED_CHECK_SECONDS instead."""
        if not self.shared:
            return False
        if self.local.followed_elsewhere:
            return True
        now = time.monotonic()
        first = self.asked_at == -math.inf
        listening = self.control is not None and self.control.healthy
        if first or terminal or (not listening and now - self.asked_at >= FOLLOWED_CHECK_SECONDS):
            self.asked_at = now
            self.local.followed_elsewhere = await stream_is_followed(self.stream)
        return self.local.followed_elsewhere

    def _log_due(self, *, terminal: bool, to_layer: bool) -> bool:
        if self.log_in_memory or to_layer or terminal:
            return True
        return (
            len(self.unlogged) >= LOG_BATCH_EVENTS
            or time.monotonic() - self.unlogged_since >= LOG_BATCH_SECONDS
        )

    async def publish(self, event: Event) -> None:
        if self.failure is not None:
            raise self.failure
        self.seq += 1
        numbered = StreamEvent(seq=self.seq, event=event)
        # Written as a dict where it leaves the process, once for the log and the layer:
        # both outlive this code version (a rolling deploy) and Redis carries msgpack.
        entry = numbered.to_dict()
        self.finished = numbered.terminal
        if self.inline:
            await log_write(self.stream, [entry])
            self.local.add(numbered)
            return
        if not self.unsent and not self.unlogged:
            self.unlogged_since = time.monotonic()
        self.unsent.append((numbered, entry))
        if not numbered.terminal:
            self.local.add(numbered)
        self.idle.clear()
        self.wake.set()
        if self.flusher is None:
            self.flusher = asyncio.create_task(self._flush_all(), name=f"flush-{self.stream}")
        if numbered.terminal or len(self.unsent) >= MAX_UNSENT_EVENTS:
            # The last event is out before the generation ends; a generation far ahead of
            # Redis waits for it (what is queued here stays bounded).
            await self.flushed()

    async def flushed(self) -> None:
        """Wait until every event published so far is flushed; raise what flushing raised."""
        await self.idle.wait()
        if self.failure is not None:
            raise self.failure

    async def close(self) -> None:
        """Flush what is left (briefly: the generation is over) and stop the flusher."""
        if self.flusher is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.idle.wait(), timeout=5.0)
        self.flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.flusher

    async def _flush_all(self) -> None:
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                while self.unsent:
                    batch, self.unsent = self.unsent, []
                    await self._flush(batch)
                self.idle.set()
        except Exception as exc:
            # Raised to the publisher by its next publish (or its wait for the last event).
            self.failure = exc
            self.idle.set()

    async def _flush(self, batch: list[tuple[StreamEvent, dict[str, Any]]]) -> None:
        last = batch[-1][0]
        self.unlogged.extend(entry for _, entry in batch)
        to_layer = await self._publish_to_layer(terminal=last.terminal)
        writes = []
        if self._log_due(terminal=last.terminal, to_layer=to_layer):
            logged, self.unlogged = self.unlogged, []
            writes.append(log_write(self.stream, logged))
            if to_layer:
                # Everything this write logs, so a follower that has just come reads
                # nothing back from the log.
                writes.append(layer_publish(self.stream, logged))
        if writes:
            await asyncio.gather(*writes)
        if last.terminal:
            self.local.add(last)


async def answer_stream_start(*, run: pipeline.AnswerRun) -> None:
    """Generate ``run``'s answer in this process, whoever follows it (or nobody)."""
    answer_id = run.answer.pk
    stream = stream_name(run.answer)
    control: Control | None = None
    try:
        if layer_is_shared():
            # Listening for a "stop" from another process before returning: a stop sent
            # right after the ask is not lost.
            control = control_for_loop()
            await control.acquire()
    except Exception:
        logger.exception("The stream of answer %s could not start", answer_id)
        await run.fail("the channel layer could not be reached")
        raise StreamUnavailable(UNAVAILABLE_MESSAGE) from None
    except asyncio.CancelledError:
        # The asker left while the listener was being set up: the answer is stored as
        # streaming and nothing would ever generate or end it. Stored as failed (shielded:
        # this task is being cancelled), it frees the asker's slot and followers settle.
        await asyncio.shield(run.fail("the request ended before the answer started"))
        raise
    local = local_streams[stream] = LocalStream()
    if control is not None:
        control.attach(stream, local)
    # A fresh context: the task must not inherit the request's (Django runs each request's
    # thread-sensitive work on an executor that ends with the request).
    task = asyncio.create_task(
        _generate(run, control, local), name=f"answer-{answer_id}", context=contextvars.Context()
    )
    running[answer_id] = task

    def _ended(_: asyncio.Task[None]) -> None:
        running.pop(answer_id, None)
        local_streams.pop(stream, None)
        local.end()

    task.add_done_callback(_ended)


async def _generate(run: pipeline.AnswerRun, control: Control | None, local: LocalStream) -> None:
    answer_id = run.answer.pk
    stream = stream_name(run.answer)
    publisher = Publisher(stream, local, control)
    produce = asyncio.create_task(_produce(run, publisher))
    stop = asyncio.ensure_future(local.stop.wait())
    try:
        await asyncio.wait({produce, stop}, return_when=asyncio.FIRST_COMPLETED)
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
        await publisher.close()
        stop.cancel()
        if control is not None:
            control.detach(stream)
            await control.release()


async def _produce(run: pipeline.AnswerRun, publisher: Publisher) -> None:
    window = int(answers_settings.STREAM_COALESCE_MS) / 1000
    pause = int(answers_settings.PREPARING_PAUSE_MS) / 1000
    first_token_out = False
    try:
        # Closed explicitly: a stop that lands while an event is being published must
        # still run the pipeline's clean-up (store the partial answer) now, not at GC.
        events = run.events()
        async with (
            aclosing(events),
            aclosing(pipeline.coalesced(events, window=window)) as stream,
        ):
            async for event in stream:
                if pause and first_token_out:
                    # New questions first (ADR 0036); never before this answer's own first
                    # token, whose wait is what the pause saves. Off (0): no lookup at all.
                    await step_aside(max_wait=pause)
                if publisher.stopping:
                    break  # closing the pipeline stores the partial answer as interrupted
                await publisher.publish(event)
                first_token_out = first_token_out or isinstance(event, TokenEvent)
    except asyncio.CancelledError:
        raise
    except Exception:
        # A bug, not a provider failure (the pipeline turns those into an error event):
        # followers still get a last word.
        logger.exception("Generating answer %s failed", run.answer.pk)
        # Not when publishing itself failed (Redis gone): it would raise that again, out of
        # a task nobody reads. The pipeline, closed, has stored the partial answer as
        # interrupted, and followers here get that from the store (follow_here).
        if not publisher.finished and publisher.failure is None:
            await publisher.publish(
                ErrorEvent(
                    pipeline.GENERIC_ERROR, answer_id=run.answer.pk, code="generation_failed"
                )
            )


async def answer_stream_stop(*, answer_id: int, user: Any) -> None:
    """Ask whichever process generates the owner's ``answer_id`` to stop; its followers
    get its ``done``."""
    answer = await sync_to_async(answer_for_follower)(answer_id, user)
    if answer.status != Answer.Status.STREAMING:
        raise AnswerNotStreaming("The answer is not being generated.", answer=answer)
    local = local_streams.get(stream_name(answer))
    if local is not None:
        local.on_stop()  # generated here
    elif layer_is_shared():
        stream = stream_name(answer)
        try:
            await control_send(stream=stream, kind=STOP)
            # And where a process of the previous version listens, during a rolling deploy.
            await layer().group_send(f"answers.control.{stream}", {"type": STOP})
        except Exception:
            # Redis away: the stop reached no one; the owner is told so and may try again.
            logger.exception("Stopping answer %s failed", answer_id)
            raise StreamUnavailable(UNAVAILABLE_MESSAGE) from None


async def answer_streams_drain(*, grace: float) -> None:
    """Shut down this process's streams: take no new questions, let the running answers
    finish for up to ``grace`` seconds, then stop the rest, which stores each as
    interrupted with its partial text and finalized citations. Followers here get that
    last word; followers elsewhere get it from the log or the database."""
    global draining
    draining = True
    loop = asyncio.get_running_loop()
    ends = loop.time() + grace
    tasks = [t for t in running.values() if not t.done() and t.get_loop() is loop]
    streams = list(local_streams.values())
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
    # Outcomes kept while the database is away (ADR 0041) are stored once it is back: wait
    # for them for the rest of the grace (at least as long as a stuck answer gets), or
    # they stay ``streaming`` until they count as abandoned and their text is lost.
    pending = pipeline.answer_pending_stores()
    if pending:
        logger.warning(
            "Shutting down: waiting for %d answer(s) to be stored (the database is away)", pending
        )
        unstored = await pipeline.answer_pending_stores_wait(timeout=max(5.0, ends - loop.time()))
        if unstored:
            logger.error(
                "Shutting down: %d answer(s) could not be stored; they will count as abandoned",
                unstored,
            )
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
    tasks = [t for t in running.values() if not t.done() and t.get_loop() is loop]
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
