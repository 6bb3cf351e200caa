"""7. What a resumable stream (``answers.streams``) costs per event, in one process.

Every case generates the same answer with ``BurstProvider`` (``DELTAS`` short words, no
delay) for the same question, and the clock runs from the stored question to the last
event a client gets (generation, citation rules and storing the answer included):

- baseline: iterating ``AnswerRun.events()`` directly (the pipeline alone, as the CLI does);
- ``answer_stream_start`` + one ``answer_stream_follow``, on the in-memory channel layer
  and the local-memory cache (the single-process default, as config/settings.py builds
  it without ``REDIS_URL``);
- the same with two followers (a second tab);
- one follower on channels-redis and Django's RedisCache on the local Redis, configured
  as config/settings.py does for ``REDIS_URL`` (a unique prefix, deleted afterwards): the
  follower in the generating process reads its events from memory, the log goes to Redis;
- the same with the follower elsewhere: it subscribes before generation starts, so it
  follows through the layer as a follower in another process does (the events go to the
  log and the layer in batches of whatever is ready when the last batch is out: the notes
  give the mean events per layer message);
- ``CONCURRENT`` shorter answers at once, one follower each, in-memory and locmem: the
  share of events that reach their follower (the log must hold every answer at once);
- and linearity: the baseline's cost per event at ``LONG_DELTAS`` against ``DELTAS``, and
  the follower elsewhere's at ``LAYER_LONG_DELTAS`` against ``DELTAS``.

Each figure is the best of ``RUNS`` runs after a warm-up (noise only ever adds time). The
notes split a relayed event into its parts: the log write (through a worker thread, as
answers.streams does it, and the cache call alone), the group send and the receive, each
per call of one event and of a batch of ``BATCH`` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth.models import User
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.test.utils import override_settings

from answers import pipeline, streams
from answers.conf import answers_settings
from answers.streams import generation
from answers.streams.log import layer_message, stream_is_followed

from . import services
from .pipeline import NO_LIMITS, asker
from .report import Row

SECTION = "7. stream relay per event (in-process)"
QUESTION = "What is a lambda expression?"
DELTAS = 500
RUNS = 5
CONCURRENT = 50
# Issue 15: the cost of an event may not grow with the answers streaming at once.
MANY_CONCURRENT = 2_000
CONCURRENT_DELTAS = 40  # as section 6's stamped providers
PARTS = 300  # calls timed per part
LONG_DELTAS = 32_000  # ~220,000 characters (NO_LIMITS lifts MAX_ANSWER_CHARS)
LAYER_LONG_DELTAS = 8_000  # through Redis: 16x DELTAS, a few seconds a run
BATCH = 32  # events per call in the batched parts
BASELINE = "AnswerRun.events() direct"


class BurstProvider:
    """``deltas`` short words as fast as it can; the first cites source 1, so the
    citation event is part of every stream."""

    name = "bench-burst"
    model = "burst"
    deltas = DELTAS

    async def stream(self, prompt: Any) -> AsyncIterator[str]:
        yield "Lambda [1] "
        for index in range(type(self).deltas - 1):
            # Now and then a marker, a code span or a paragraph break: the filter must
            # parse, not only pass plain words through.
            if index % 50 == 49:
                yield f"w{index} [1] `c[2]`.\n\n"
            else:
                yield f"w{index} "
            # One loop turn per delta, as a provider reading a socket takes.
            await asyncio.sleep(0)


class ShortBurstProvider(BurstProvider):
    deltas = CONCURRENT_DELTAS


class LongBurstProvider(BurstProvider):
    deltas = LONG_DELTAS


class LayerLongBurstProvider(BurstProvider):
    deltas = LAYER_LONG_DELTAS


@contextlib.contextmanager
def _layer_messages() -> Iterator[list[int]]:
    """The events each layer message of the generating process carries, while it runs."""
    sizes: list[int] = []
    publish = generation.layer_publish

    async def counting(stream: str, entries: list[dict[str, Any]]) -> None:
        sizes.append(len(entries))
        await publish(stream, entries)

    generation.layer_publish = counting
    try:
        yield sizes
    finally:
        generation.layer_publish = publish


@dataclass(frozen=True)
class Outcome:
    seconds: float
    events: int  # events of the answers (as numbered by the generator)
    delivered: list[int]  # events each client got
    complete: bool  # every client got every numbered event once, in order


async def _direct(user: User) -> tuple[int, float]:
    run = await pipeline.start_answer(user=user, question=QUESTION)
    if not run.sources:
        raise RuntimeError(f"{QUESTION!r} retrieves no source from the demo corpus")
    count = 0
    async with aclosing(run.events()) as events:
        async for _ in events:
            count += 1
    return count, time.perf_counter()


async def _baseline(user: User, answers: int = 1) -> Outcome:
    start = time.perf_counter()
    results = await asyncio.gather(*(_direct(user) for _ in range(answers)))
    counts = [count for count, _ in results]
    return Outcome(max(end for _, end in results) - start, sum(counts), counts, True)


async def _follow(answer_id: int, user: User) -> tuple[list[streams.StreamEvent], float]:
    got = []
    events = streams.answer_stream_follow(answer_id=answer_id, user=user)
    async with aclosing(events):
        async for event in events:
            got.append(event)
    return got, time.perf_counter()


async def _one_relayed(user: User, followers: int) -> list[tuple[list[streams.StreamEvent], float]]:
    run = await pipeline.start_answer(user=user, question=QUESTION)
    await streams.answer_stream_start(run=run)
    return await asyncio.gather(*(_follow(run.answer.pk, user) for _ in range(followers)))


async def _one_relayed_elsewhere(user: User) -> list[tuple[list[streams.StreamEvent], float]]:
    run = await pipeline.start_answer(user=user, question=QUESTION)
    # Not generated here yet, so the follower takes the layer's path; generation starts
    # once it has said it listens, so every event goes through the layer.
    follower = asyncio.create_task(_follow(run.answer.pk, user))
    while not await stream_is_followed(streams.stream_name(run.answer)):
        await asyncio.sleep(0.001)
    await streams.answer_stream_start(run=run)
    return [await follower]


async def _relayed(
    user: User, events: int, followers: int = 1, answers: int = 1, elsewhere: bool = False
) -> Outcome:
    """``events``: how many each answer publishes (the direct run's count: the provider is
    deterministic, and answers.streams relays the pipeline's events one for one)."""
    start = time.perf_counter()

    def one() -> Awaitable[list[tuple[list[streams.StreamEvent], float]]]:
        return _one_relayed_elsewhere(user) if elsewhere else _one_relayed(user, followers)

    per_answer = await asyncio.gather(*(one() for _ in range(answers)))
    results = [result for answer in per_answer for result in answer]
    elapsed = max(end for _, end in results) - start
    await streams.answer_streams_wait(timeout=30)
    expected = list(range(1, events + 1))
    complete = all([e.seq for e in got] == expected for got, _ in results)
    return Outcome(elapsed, events * answers, [len(got) for got, _ in results], complete)


async def _relayed_then_drain(user: User, events: int, answers: int) -> Outcome:
    try:
        return await _relayed(user, events, answers=answers)
    finally:
        await _drain()


async def _drain() -> None:
    """Settle what the layer left running (channels-redis keeps cancelled receives until
    their BZPOPMIN returns), so the loop closes without 'never retrieved' noise."""
    await asyncio.sleep(0)
    leftover = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in leftover:
        task.cancel()
    await asyncio.gather(*leftover, return_exceptions=True)


def _best(measure: Callable[[], Awaitable[Outcome]], runs: int = RUNS) -> Outcome:
    async def timed() -> list[Outcome]:
        try:
            await measure()  # warm-up: imports, connections, the layer's first channels
            return [await measure() for _ in range(runs)]
        finally:
            await _drain()

    outcomes = async_to_sync(timed)()
    best = min(outcomes, key=lambda o: o.seconds / max(o.events, 1))
    # Completeness over every run, not only the fastest.
    return Outcome(best.seconds, best.events, best.delivered, all(o.complete for o in outcomes))


async def _per_call(fn: Callable[[int], Awaitable[object]]) -> float:
    start = time.perf_counter()
    for index in range(1, PARTS + 1):
        await fn(index)
    return (time.perf_counter() - start) / PARTS


async def _parts() -> dict[str, float]:
    """Seconds per call of each step answers.streams takes per event (ADR 0008: one cache
    write, then one group send; the follower's receive), through the public cache and
    layer APIs, on keys and a group of the bench's own."""
    layer = get_channel_layer()
    assert layer is not None
    cache = caches[str(answers_settings.STREAM_CACHE)]
    ttl = int(answers_settings.STREAM_LOG_TTL)
    channel = await layer.new_channel()
    group = "bench.relay.parts"
    await layer.group_add(group, channel)

    def entry(seq: int) -> dict[str, Any]:
        return {"seq": seq, "type": "token", "text": f"w{seq} "}

    def write(seq: int, events: int = 1) -> None:
        # The log's shape: each event under its seq, and the last seq.
        first = (seq - 1) * events + 1
        seqs = range(first, first + events)
        logged: dict[str, Any] = {f"bench:relay:{n}": entry(n) for n in seqs}
        logged["bench:relay:last"] = first + events - 1
        cache.set_many(logged, timeout=ttl)

    # As answers.streams does it: off the ORM's thread, on a worker thread.
    threaded = sync_to_async(write, thread_sensitive=False)

    async def inline(seq: int) -> None:
        write(seq)

    async def send(seq: int, events: int = 1) -> None:
        first = (seq - 1) * events + 1
        batch = [entry(n) for n in range(first, first + events)]
        await layer.group_send(group, layer_message(batch))

    threaded_batch = sync_to_async(lambda seq: write(seq, BATCH), thread_sensitive=False)

    try:
        return {
            "log write": await _per_call(threaded),
            "of which cache": await _per_call(inline),
            "group_send": await _per_call(send),
            "receive": await _per_call(lambda _: layer.receive(channel)),
            f"log write of {BATCH}": await _per_call(threaded_batch),
            f"group_send of {BATCH}": await _per_call(lambda seq: send(seq, BATCH)),
            f"receive of {BATCH}": await _per_call(lambda _: layer.receive(channel)),
        }
    finally:
        await layer.group_discard(group, channel)
        await _drain()


def _parts_note(parts: dict[str, float]) -> str:
    return "parts per call: " + ", ".join(f"{k} {v * 1e6:.0f} µs" for k, v in parts.items())


def _batches_note(sizes: list[int]) -> str:
    if not sizes:
        return "no layer message"
    return f"{sum(sizes) / len(sizes):.1f} events per layer message ({len(sizes)} messages)"


def _answers(provider: type[BurstProvider] = BurstProvider) -> dict[str, Any]:
    path = f"{__name__}.{provider.__name__}"
    # The long run needs room: 32,000 deltas are ~220,000 characters.
    return {"PROVIDER": path, "STREAM_COALESCE_MS": 0, "MAX_ANSWER_CHARS": 500_000, **NO_LIMITS}


def _rows(label: str, outcome: Outcome, base: Outcome, parts: str = "") -> list[Row]:
    per_event, base_per_event = outcome.seconds / outcome.events, base.seconds / base.events
    overhead = (per_event - base_per_event) * 1e6
    delivered = "/".join(str(n) for n in outcome.delivered)
    note = f"+{overhead:.0f} µs per event; {outcome.events} events, delivered {delivered}"
    if not outcome.complete:
        note += "; INCOMPLETE: events lost, or the stored result sent instead"
    if parts:
        note += f"; {parts}"
    return [
        Row(SECTION, f"{label}, events/s", outcome.events / outcome.seconds,
            base.events / base.seconds, "events/s", BASELINE, None),
        Row(SECTION, f"{label}, per event", per_event, base_per_event, "s", BASELINE, None,
            note=note),
    ]  # fmt: skip


def _concurrent_rows(user: User) -> list[Row]:
    label = f"{CONCURRENT} answers at once ({CONCURRENT_DELTAS} deltas), 1 follower each"
    layers, cache = services.layer_and_cache_settings("")
    with override_settings(
        ANSWERS=_answers(ShortBurstProvider), CHANNEL_LAYERS=layers, CACHES=cache
    ):
        base = _best(lambda: _baseline(user, CONCURRENT), runs=2)
        each = base.delivered[0]
        relayed = _best(lambda: _relayed(user, each, answers=CONCURRENT), runs=2)
        # One measured run (after the 50s above warmed everything): 2,000 answers take
        # tens of seconds. The process may generate that many here.
        many_settings = {**_answers(ShortBurstProvider), "MAX_PROCESS_STREAMS": MANY_CONCURRENT}
        with override_settings(ANSWERS=many_settings):
            many = async_to_sync(_relayed_then_drain)(user, each, MANY_CONCURRENT)
    lost = "" if relayed.complete else "; INCOMPLETE: followers lost events"
    timing = f"{relayed.seconds:.2f} s relayed vs {base.seconds:.2f} s direct"
    many_label = f"{MANY_CONCURRENT:,} answers at once, 1 follower each, per event"
    many_note = (
        f"each answer's whole pipeline (retrieval, storing) included; {many.events} events in "
        f"{many.seconds:.1f} s, delivered {sum(many.delivered)}"
        + ("" if many.complete else "; INCOMPLETE: followers lost events")
    )
    return [
        Row(SECTION, many_label, many.seconds / many.events, relayed.seconds / relayed.events,
            "s", f"per event, {CONCURRENT} at once", ("<=", 1.5), note=many_note),
        Row(SECTION, f"{label}, events/s", relayed.events / relayed.seconds,
            base.events / base.seconds, "events/s", f"{BASELINE}, {CONCURRENT} at once", None),
        # What followers got of what the generators published (the direct runs got all).
        Row(SECTION, f"{label}, events delivered", sum(relayed.delivered), relayed.events,
            "", "events published", ("==", 1.0),
            note=f"in-memory layer + locmem (the defaults without REDIS_URL); {timing}{lost}"),
    ]  # fmt: skip


def _linearity_row(user: User, base: Outcome) -> Row:
    with override_settings(ANSWERS=_answers(LongBurstProvider)):
        long = _best(lambda: _baseline(user), runs=2)
    per_event, base_per_event = long.seconds / long.events, base.seconds / base.events
    return Row(SECTION, f"linearity: AnswerRun.events() per event, {LONG_DELTAS:,} deltas",
               per_event, base_per_event, "s", f"per event at {DELTAS} deltas", ("<=", 1.3),
               note=f"1.0 is linear; {long.events} events in {long.seconds:.2f} s")  # fmt: skip


def _layer_linearity_rows(
    user: User, layers: dict[str, Any], cache: dict[str, Any], short: Outcome
) -> list[Row]:
    """The follower elsewhere's cost per event at LAYER_LONG_DELTAS against DELTAS: batching
    must not make a long answer dearer per event."""
    with override_settings(
        ANSWERS=_answers(LayerLongBurstProvider), CHANNEL_LAYERS=layers, CACHES=cache
    ):
        direct = _best(lambda: _baseline(user), runs=1)
        with _layer_messages() as sizes:
            long = _best(lambda: _relayed(user, direct.events, elsewhere=True), runs=2)
    per_event, short_per_event = long.seconds / long.events, short.seconds / short.events
    note = f"1.0 is linear; {long.events} events in {long.seconds:.2f} s; {_batches_note(sizes)}"
    if not long.complete:
        note += "; INCOMPLETE: events lost, or the stored result sent instead"
    return [
        Row(SECTION, f"linearity: through the layer per event, {LAYER_LONG_DELTAS:,} deltas",
            per_event, short_per_event, "s", f"per event at {DELTAS} deltas", ("<=", 1.3),
            note=note),
    ]  # fmt: skip


def _case(
    label: str,
    user: User,
    layers: dict[str, Any],
    cache: dict[str, Any],
    followers: int,
    base: Outcome,
    elsewhere: bool = False,
) -> tuple[list[Row], Outcome]:
    with override_settings(ANSWERS=_answers(), CHANNEL_LAYERS=layers, CACHES=cache):
        with _layer_messages() as sizes:
            outcome = _best(lambda: _relayed(user, base.events, followers, elsewhere=elsewhere))
        parts = _parts_note(async_to_sync(_parts)()) if followers == 1 else ""
        if elsewhere:
            parts = f"{_batches_note(sizes)}; {parts}"
        if isinstance(caches["default"], LocMemCache):
            caches["default"].clear()  # the next case starts with an empty log (never Redis)
    return _rows(label, outcome, base, parts), outcome


def run() -> list[Row]:
    user = asker("bench-relay")
    with override_settings(ANSWERS=_answers()):
        base = _best(lambda: _baseline(user))
    memory = services.layer_and_cache_settings("")
    rows = _case("in-memory layer + locmem, 1 follower", user, *memory, 1, base)[0]
    rows += _case("in-memory layer + locmem, 2 followers", user, *memory, 2, base)[0]
    try:
        services.require_redis()
        prefix = services.unique_prefix()
        try:
            layers, cache = services.layer_and_cache_settings(services.REDIS_URL, prefix)
            label = "channels-redis + RedisCache, 1 follower"
            rows += _case(label, user, layers, cache, 1, base)[0]
            label += " elsewhere (through the layer)"
            elsewhere, outcome = _case(label, user, layers, cache, 1, base, elsewhere=True)
            rows += elsewhere
            rows += _layer_linearity_rows(user, layers, cache, outcome)
        finally:
            services.delete_redis_keys(prefix)
    except services.Unavailable as exc:
        print(f"[bench] stream relay: Redis case skipped: {exc}", file=sys.stderr)
    rows += _concurrent_rows(user)
    # The baseline's own cost per event should not grow with the answer's length.
    rows.append(_linearity_row(user, base))
    return rows
