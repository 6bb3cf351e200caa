"""The preparing lane: questions are prepared a few at a time, oldest first; answers
already streaming may step aside while questions wait (ADR 0036).

An ask is prepared in several steps (the socket's user check, the limits, retrieval,
storing) that queue on shared threads. Left to themselves, fifty asks at once each queue
their first step before any queues its last, so the first questions wait for everyone's
first steps. Through the lane a few asks prepare at a time, each to its end, in the order
they came. With ``PREPARING_PAUSE_MS`` set, running answers also pause between events
while asks wait (off by default: it costs throughput under large bursts).

Pure asyncio, one lane per event loop (asyncio's futures belong to one loop; tests run
several loops in one process).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass


@dataclass
class _Hold:
    lane: Lane
    key: float
    task: asyncio.Task[object] | None
    owned: bool = True


# The lane place the current task holds, if any: nested ``turn()`` calls (a transport's
# own step, then the pipeline's) share one place. A task started inside a turn inherits
# the variable, not the place: each hold names its task.
_holding: contextvars.ContextVar[_Hold | None] = contextvars.ContextVar(
    "answers_lane_holding", default=None
)


def _held_here(lane: Lane) -> _Hold | None:
    """The current task's hold on ``lane``, if it has one."""
    held = _holding.get()
    if held is None or held.lane is not lane or held.task is not asyncio.current_task():
        return None
    return held


class Lane:
    """At most ``capacity`` holders at once; the place that frees goes to the waiter with
    the smallest key (its ask's arrival), not to whoever asked for it last."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a lane holds at least one")
        self.capacity = capacity
        self.holders = 0
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # equal keys keep arrival order
        self._live = 0  # waiters not cancelled
        # Set while nobody waits: what running answers wait for (``step_aside``).
        self.quiet = asyncio.Event()
        self.quiet.set()

    @property
    def waiting(self) -> int:
        return self._live

    @asynccontextmanager
    async def turn(
        self,
        *,
        key: float | None = None,
        before_waiting: Callable[[], Awaitable[object]] | None = None,
    ) -> AsyncIterator[None]:
        """Hold a place for the block; a block nested in one that holds this lane already
        (in the same task) shares that place. ``before_waiting`` runs only when the place
        is not free at once (to give back what the waiting would hold: a connection)."""
        held = _held_here(self)
        if held is not None and held.owned:
            yield
            return
        if key is None:
            key = asyncio.get_running_loop().time()
        await self._acquire(key, before_waiting)
        hold = _Hold(self, key, asyncio.current_task())
        token = _holding.set(hold)
        try:
            yield
        finally:
            _holding.reset(token)
            if hold.owned:
                self._release()

    @asynccontextmanager
    async def aside(self) -> AsyncIterator[None]:
        """Give the place up for the block (a wait on the network that needs no thread),
        then take it back ahead of every ask that came later."""
        held = _held_here(self)
        if held is None or not held.owned:
            yield
            return
        held.owned = False
        self._release()
        yield  # on an error (a cancel) the place is not taken back: nothing to give up
        await self._acquire(held.key)
        held.owned = True

    async def _acquire(
        self, key: float, before_waiting: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        if self.holders < self.capacity and not self._live:
            self.holders += 1
            return
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (key, next(self._order), place))
        self._live += 1
        self.quiet.clear()
        try:
            if before_waiting is not None:
                await before_waiting()
            await place
        except BaseException:  # a cancel, or ``before_waiting`` failed
            if place.done() and not place.cancelled():
                self._release()  # handed over just before: pass it on
            else:
                place.cancel()  # still in the heap: skipped when it comes up
                self._left()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, place = heapq.heappop(self._waiting)
            if not place.done():
                place.set_result(None)
                self._left()
                return  # handed over: the number of holders stays
        self.holders -= 1

    def _left(self) -> None:
        self._live -= 1
        if not self._live:
            self.quiet.set()

    def others(self) -> int:
        """Asks holding or waiting for a place, the current task's own not counted."""
        held = _held_here(self)
        mine = 1 if held is not None and held.owned else 0
        return self.holders + self._live - mine


_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Lane] = weakref.WeakKeyDictionary()


def lane_for_loop(*, capacity: int) -> Lane:
    """This event loop's lane. A changed capacity (settings) applies once the lane is idle."""
    loop = asyncio.get_running_loop()
    lane = _lanes.get(loop)
    if lane is None or (lane.capacity != capacity and not lane.holders and not lane.waiting):
        lane = _lanes[loop] = Lane(capacity)
    return lane


def lane_of_loop() -> Lane | None:
    """This event loop's lane if an ask has made one."""
    return _lanes.get(asyncio.get_running_loop())


async def step_aside(*, max_wait: float) -> None:
    """For a running answer between two events: wait while asks wait for the lane, at most
    ``max_wait`` seconds (0: never)."""
    if max_wait <= 0:
        return
    lane = lane_of_loop()
    if lane is None or lane.quiet.is_set():
        return
    with suppress(TimeoutError):
        await asyncio.wait_for(lane.quiet.wait(), max_wait)
