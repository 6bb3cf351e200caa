"""Resumable answer streams: generation belongs to the answer, not to the socket that asked.

``answer_stream_start`` runs an answer's pipeline (``AnswerRun.events()``) as a task of
this process. Every event gets a sequence number (1, 2, ...), goes to the followers in
this process at once, and is appended to the answer's *log* in the cache
(``ANSWERS["STREAM_CACHE"]``, kept ``STREAM_LOG_TTL`` seconds) and, once a follower
elsewhere listens, sent to the answer's group on the channel layer: both in batches of
the events ready at once, a batch's log write and send together, the next batch after
both. So a follower that subscribes and *then* reads the log misses nothing (what its
replay lacks comes on the layer, or is in the log when a message shows a gap):

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

import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from .. import pipeline
from ..events import DoneEvent, ErrorEvent, StreamEvent
from .generation import (
    answer_stream_start,
    answer_stream_stop,
    answer_streams_check_accepting,
    answer_streams_drain,
    answer_streams_drain_on_shutdown,
    answer_streams_wait,
    local_streams,
)
from .log import stream_name
from .refusals import (
    ABANDONED_MESSAGE,
    BUSY_MESSAGE,
    BUSY_RETRY_AFTER,
    DRAINING_MESSAGE,
    DRAINING_RETRY_AFTER,
    UNAVAILABLE_MESSAGE,
    AnswerNotFound,
    AnswerNotStreaming,
    ServerBusy,
    ServerDraining,
    StreamUnavailable,
)
from .relay import answer_stream_follow, answer_stream_open, follow_here, stored

__all__ = [
    "ABANDONED_MESSAGE",
    "BUSY_MESSAGE",
    "BUSY_RETRY_AFTER",
    "DRAINING_MESSAGE",
    "DRAINING_RETRY_AFTER",
    "UNAVAILABLE_MESSAGE",
    "AnswerNotFound",
    "AnswerNotStreaming",
    "AskedStream",
    "ServerBusy",
    "ServerDraining",
    "StreamEvent",
    "StreamUnavailable",
    "answer_stream_ask",
    "answer_stream_begin",
    "answer_stream_complete",
    "answer_stream_follow",
    "answer_stream_open",
    "answer_stream_start",
    "answer_stream_stop",
    "answer_streams_check_accepting",
    "answer_streams_drain",
    "answer_streams_drain_on_shutdown",
    "answer_streams_wait",
]


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
    local = local_streams.get(stream_name(run.answer))
    if local is None:  # already over (it cannot be, but the stored result would do)
        return stored(answer_id=run.answer.pk, user=run.user)
    return follow_here(local, answer_id=run.answer.pk, user=run.user, after=0)


async def answer_stream_complete(
    *, user: Any, question: object, conversation_id: uuid.UUID | None
) -> DoneEvent | ErrorEvent:
    """Ask as ``answer_stream_begin`` does and wait for the answer's last word (the JSON
    path). Generated like every streamed answer, so it counts towards
    ``MAX_PROCESS_STREAMS``, is let finish when the process shuts down, can be followed
    and stopped from anywhere meanwhile, and goes on if the asker leaves."""
    asked = await answer_stream_begin(user=user, question=question, conversation_id=conversation_id)
    last: DoneEvent | ErrorEvent | None = None
    async with aclosing(asked.events) as events:
        async for item in events:
            if isinstance(item.event, DoneEvent | ErrorEvent):
                last = item.event
    assert last is not None  # every stream ends with one
    return last
