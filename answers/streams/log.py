"""An answer's stream outside the process: its names, its log in the cache, and the
channel layer (ADR 0008). Every event is written to the log before anyone else sees it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.core.cache import BaseCache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..conf import answers_settings
from ..events import StreamEvent
from ..models import Answer


def stream_name(answer: Answer) -> str:
    """The answer's id and its creation to the microsecond: a database restored or
    recreated reuses ids, and must not meet the logs and groups of the old answers."""
    return f"{answer.pk}.{int(answer.created_at.timestamp() * 1_000_000)}"


def answer_group(stream: str) -> str:
    return f"answers.answer.{stream}"


def log_key(stream: str, part: int | str) -> str:
    return f"answers:stream:{stream}:{part}"


def layer() -> BaseChannelLayer:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("Resumable answer streams need CHANNEL_LAYERS (docs/deployment.md).")
    return layer


_stream_caches: dict[str, BaseCache] = {}
_stream_caches_lock = threading.Lock()


def stream_cache() -> BaseCache:
    """The ``STREAM_CACHE``, one instance per process. Not ``caches[alias]``: that is an
    asgiref ``Local``, one instance per context and thread, so an answer's task of its own
    could build its own Redis client and pool and open a connection of its own, with a
    TCP connect and handshake (30 tasks, 30 connections: tests/test_streams.py). Django's
    Redis and local-memory caches are thread-safe; a local-memory instance shares its
    store with every other of the same name."""
    alias = str(answers_settings.STREAM_CACHE)
    cache = _stream_caches.get(alias)
    if cache is None:
        with _stream_caches_lock:
            cache = _stream_caches.get(alias)
            if cache is None:
                cache = _stream_caches[alias] = caches.create_connection(alias)
    return cache


@receiver(setting_changed)
def _forget_stream_caches(*, setting: str, **kwargs: Any) -> None:
    if setting in {"CACHES", "ANSWERS"}:
        with _stream_caches_lock:
            _stream_caches.clear()


def layer_is_shared() -> bool:
    """Whether another process can follow or stop an answer through the layer (Redis):
    with the in-memory layer, none can, and publishing to it would only cost."""
    return not isinstance(layer(), InMemoryChannelLayer)


# The cache's own async methods run on the one thread Django's ORM shares; the log must
# not queue behind database work, and both the Redis and the local-memory cache are
# thread-safe.
def _log_write_sync(stream: str, entries: list[dict[str, Any]]) -> None:
    # The events and the last seq in one call (one round trip, a MULTI on Redis): a
    # reader never sees a "last" whose events are not there yet.
    logged: dict[str, Any] = {log_key(stream, entry["seq"]): entry for entry in entries}
    logged[log_key(stream, "last")] = entries[-1]["seq"]
    stream_cache().set_many(logged, timeout=int(answers_settings.STREAM_LOG_TTL))


def _log_read_sync(stream: str, after: int, upto: int | None) -> list[StreamEvent] | None:
    """Logged events after ``after`` (up to ``upto``); None when the log is gone."""
    cache = stream_cache()
    last = cache.get(log_key(stream, "last"))
    if last is None:
        return None
    end = int(last) if upto is None else min(int(last), upto)
    keys = [log_key(stream, seq) for seq in range(after + 1, end + 1)]
    found = cache.get_many(keys) if keys else {}
    if len(found) != len(keys):
        return None  # partly evicted: only the stored result is whole
    return [StreamEvent.from_dict(found[key]) for key in keys]


_log_write_elsewhere = sync_to_async(_log_write_sync, thread_sensitive=False)
_log_read_elsewhere = sync_to_async(_log_read_sync, thread_sensitive=False)


def _log_is_local() -> bool:
    # A local-memory cache answers in microseconds: a thread hop would cost ten times more.
    return isinstance(stream_cache(), LocMemCache)


def log_is_local() -> bool:
    """Whether the log lives in this process's memory (writing it costs microseconds)."""
    return _log_is_local()


async def log_write(stream: str, entries: list[dict[str, Any]]) -> None:
    """Append ``entries`` (consecutive events, in order) to ``stream``'s log."""
    if _log_is_local():
        _log_write_sync(stream, entries)
    else:
        await _log_write_elsewhere(stream, entries)


async def log_read(stream: str, after: int, upto: int | None) -> list[StreamEvent] | None:
    if _log_is_local():
        return _log_read_sync(stream, after, upto)
    return await _log_read_elsewhere(stream, after, upto)


# A follower in another process says so in the cache before it reads the log; until one
# has, the generating process publishes nothing to the layer (its own followers have the
# events already, and a late one finds them in the log it replays).
def _followed_key(stream: str) -> str:
    return log_key(stream, "followed")


def _mark_followed_sync(stream: str) -> None:
    stream_cache().set(_followed_key(stream), 1, timeout=int(answers_settings.STREAM_LOG_TTL))


def _is_followed_sync(stream: str) -> bool:
    return stream_cache().get(_followed_key(stream)) is not None


_mark_followed_elsewhere = sync_to_async(_mark_followed_sync, thread_sensitive=False)
_is_followed_elsewhere = sync_to_async(_is_followed_sync, thread_sensitive=False)


async def stream_mark_followed(stream: str) -> None:
    """Say that a process other than the generating one follows ``stream``."""
    if _log_is_local():
        _mark_followed_sync(stream)
    else:
        await _mark_followed_elsewhere(stream)


async def stream_is_followed(stream: str) -> bool:
    if _log_is_local():
        return _is_followed_sync(stream)
    return await _is_followed_elsewhere(stream)


# An answer's events go to its group in messages of one or more consecutive events: the
# last one under "event", any before it, in order, under "earlier" (absent for one). A
# reader of the one-event shape (an older process during a rolling deploy) still gets
# every event: it sees a gap and reads the earlier ones from the log, written first.
EVENTS_MESSAGE = "answer.event"


def layer_message(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The layer message carrying ``entries`` (consecutive events, in order)."""
    message: dict[str, Any] = {"type": EVENTS_MESSAGE, "event": entries[-1]}
    if len(entries) > 1:
        message["earlier"] = entries[:-1]
    return message


def layer_events(message: dict[str, Any]) -> list[StreamEvent]:
    """The events a layer message carries, in order (none for any other message)."""
    if message.get("type") != EVENTS_MESSAGE:
        return []
    entries = [*message.get("earlier", ()), message["event"]]
    return [StreamEvent.from_dict(entry) for entry in entries]


async def layer_publish(stream: str, entries: list[dict[str, Any]]) -> None:
    """Send ``entries`` to ``stream``'s followers elsewhere, in one group send."""
    await layer().group_send(answer_group(stream), layer_message(entries))


WAKE = {"type": "answer.wake"}


async def end_receive(
    channel_layer: BaseChannelLayer, channel: str, pending: asyncio.Future[Any] | None
) -> None:
    """End a receive still waiting on ``channel`` with a message of its own, not a
    cancel: channels-redis lets a cancelled receive go only when its blocking pop times
    out (5 s), which would hold up whoever awaits it."""
    if pending is None or pending.done():
        return
    with contextlib.suppress(Exception):
        await channel_layer.send(channel, WAKE)
        await asyncio.wait({pending}, timeout=1.0)
    if not pending.done():
        pending.cancel()
    # Retrieved, so that an error of the last read is not logged as never retrieved.
    pending.add_done_callback(lambda f: f.cancelled() or f.exception())
