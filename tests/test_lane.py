"""The preparing lane (answers.lane): bounded, oldest first, nothing lost to a cancel; and
running answers step aside while questions wait (ADR 0036)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from answers.lane import Lane, lane_for_loop, lane_of_loop, step_aside


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class _Holder:
    """A task that takes a turn with ``key`` and keeps it until let go."""

    def __init__(self, lane: Lane, key: float, log: list[float]) -> None:
        self.go = asyncio.Event()
        self.inside = asyncio.Event()
        self.task = asyncio.ensure_future(self._run(lane, key, log))

    async def _run(self, lane: Lane, key: float, log: list[float]) -> None:
        async with lane.turn(key=key):
            log.append(key)
            self.inside.set()
            await self.go.wait()


async def test_no_more_than_capacity_hold_at_once():
    lane = Lane(2)
    log: list[float] = []
    holders = [_Holder(lane, float(key), log) for key in range(5)]
    await _settle()
    assert log == [0.0, 1.0] and lane.holders == 2 and lane.waiting == 3
    holders[0].go.set()
    await _settle()
    assert log == [0.0, 1.0, 2.0] and lane.holders == 2 and lane.waiting == 2
    for holder in holders:
        holder.go.set()
    await asyncio.gather(*(holder.task for holder in holders))
    assert (lane.holders, lane.waiting, lane.quiet.is_set()) == (0, 0, True)


async def test_a_freed_place_goes_to_the_oldest_waiter_not_the_latest():
    lane = Lane(1)
    log: list[float] = []
    first = _Holder(lane, 0.0, log)
    await _settle()
    # They come in this order; the place goes by key (when the ask arrived).
    waiters = [_Holder(lane, key, log) for key in (3.0, 1.0, 2.0)]
    await _settle()
    first.go.set()
    for waiter in waiters:
        waiter.go.set()
    await asyncio.gather(first.task, *(w.task for w in waiters))
    assert log == [0.0, 1.0, 2.0, 3.0]


async def test_a_waiter_cancelled_leaves_no_place_taken():
    lane = Lane(1)
    log: list[float] = []
    first = _Holder(lane, 0.0, log)
    await _settle()
    gone = _Holder(lane, 1.0, log)
    stays = _Holder(lane, 2.0, log)
    await _settle()
    gone.task.cancel()
    await _settle()
    assert lane.waiting == 1 and not lane.quiet.is_set()
    first.go.set()
    await first.task
    await stays.inside.wait()
    assert log == [0.0, 2.0]
    stays.go.set()
    await stays.task
    assert (lane.holders, lane.waiting, lane.quiet.is_set()) == (0, 0, True)


async def test_a_place_handed_to_a_waiter_cancelled_at_that_moment_is_passed_on():
    lane = Lane(1)
    log: list[float] = []
    first = lane.turn(key=0.0)
    await first.__aenter__()
    unlucky = _Holder(lane, 1.0, log)
    next_one = _Holder(lane, 2.0, log)
    await _settle()
    await first.__aexit__(None, None, None)  # hands the place to ``unlucky``: no loop turn
    unlucky.task.cancel()  # before it could run
    await next_one.inside.wait()
    assert log == [2.0] and lane.holders == 1
    next_one.go.set()
    await next_one.task
    assert lane.holders == 0


async def test_a_nested_turn_shares_the_place_and_others_leaves_the_asker_out():
    lane = Lane(1)
    async with lane.turn():
        assert lane.others() == 0
        async with lane.turn():  # the pipeline's own turn inside a transport's
            assert lane.holders == 1
    assert lane.holders == 0
    log: list[float] = []
    holder = _Holder(lane, 0.0, log)
    await holder.inside.wait()
    assert lane.others() == 1
    holder.go.set()
    await holder.task


async def test_aside_gives_the_place_up_and_comes_back_ahead_of_later_asks():
    lane = Lane(1)
    log: list[float] = []
    back = asyncio.Event()

    async def rewriting() -> None:
        async with lane.turn(key=0.0):
            log.append(0.0)
            async with lane.aside():
                await back.wait()  # a rewrite on the network
            log.append(0.5)

    task = asyncio.ensure_future(rewriting())
    await _settle()
    early = _Holder(lane, 1.0, log)  # gets the place while the rewrite waits
    later = _Holder(lane, 2.0, log)
    await early.inside.wait()
    back.set()
    await _settle()
    early.go.set()
    later.go.set()
    await asyncio.gather(task, early.task, later.task)
    assert log == [0.0, 1.0, 0.5, 2.0]
    assert lane.holders == 0


async def test_step_aside_waits_while_asks_wait_and_never_longer_than_asked():
    lane = lane_for_loop(capacity=1)
    await asyncio.wait_for(step_aside(max_wait=10), 1)  # nobody waits: at once
    log: list[float] = []
    holder = _Holder(lane, 0.0, log)
    waiter = _Holder(lane, 1.0, log)
    await _settle()
    assert not lane.quiet.is_set()
    await asyncio.wait_for(step_aside(max_wait=0), 1)  # 0: never pauses
    await asyncio.wait_for(step_aside(max_wait=0.01), 1)  # bounded
    pausing = asyncio.ensure_future(step_aside(max_wait=10))
    await _settle()
    assert not pausing.done()
    holder.go.set()  # the waiter gets its place: nobody waits any more
    await asyncio.wait_for(pausing, 1)
    waiter.go.set()
    await asyncio.gather(holder.task, waiter.task)


async def test_each_event_loop_has_its_own_lane_and_an_idle_lane_takes_a_new_capacity():
    lane = lane_for_loop(capacity=2)
    assert lane_of_loop() is lane and lane_for_loop(capacity=2) is lane
    async with lane.turn():
        assert lane_for_loop(capacity=3) is lane  # busy: kept
    assert lane_for_loop(capacity=3).capacity == 3

    def elsewhere() -> Lane | None:
        return asyncio.run(_lane_there())

    assert await asyncio.to_thread(elsewhere) is not lane


async def _lane_there() -> Lane | None:
    lane_for_loop(capacity=2)
    return lane_of_loop()


def test_capacity_is_at_least_one():
    with pytest.raises(ValueError):
        Lane(0)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 4),
    asks=st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=14),
)
def test_any_mix_of_asks_and_cancels_ends_with_every_place_free(capacity, asks):
    """Whatever the keys and whichever asks are cancelled while they wait: never more than
    ``capacity`` inside, the asks that got in after the lane filled up did so oldest first,
    and the lane ends empty and quiet."""

    async def scenario() -> None:
        lane = Lane(capacity)
        log: list[float] = []
        inside = [0]
        most = [0]

        async def one(key: float) -> None:
            async with lane.turn(key=key):
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                log.append(key)
                await asyncio.sleep(0)
                inside[0] -= 1

        blocker = _Holder(lane, -1.0, log)
        fillers = [_Holder(lane, -1.0, log) for _ in range(capacity - 1)]
        await _settle()
        tasks = [(asyncio.ensure_future(one(float(key))), cancel) for key, cancel in asks]
        await _settle()
        for task, cancel in tasks:
            if cancel:
                task.cancel()
        blocker.go.set()
        for filler in fillers:
            filler.go.set()
        await asyncio.gather(*(task for task, _ in tasks), return_exceptions=True)
        await asyncio.gather(blocker.task, *(f.task for f in fillers))
        assert most[0] <= capacity
        entered = [key for key in log if key >= 0]
        if capacity == 1:
            assert entered == sorted(entered)
        assert sorted(entered) == sorted(float(k) for k, cancel in asks if not cancel)
        assert (lane.holders, lane.waiting, lane.quiet.is_set()) == (0, 0, True)

    asyncio.run(scenario())


async def test_before_waiting_runs_only_when_the_place_is_not_free_at_once():
    lane = Lane(1)
    calls: list[str] = []

    async def give_back() -> None:
        calls.append("gave back")

    async with lane.turn(before_waiting=give_back):
        assert calls == []
        log: list[float] = []
        holder = asyncio.ensure_future(_waiting_with(lane, give_back, log))
        await _settle()
        assert calls == ["gave back"] and log == []
    await holder
    assert log == [1.0]


async def _waiting_with(lane: Lane, before_waiting, log: list[float]) -> None:  # type: ignore[no-untyped-def]
    async with lane.turn(key=1.0, before_waiting=before_waiting):
        log.append(1.0)


async def test_a_failing_before_waiting_leaves_no_place_taken():
    lane = Lane(1)
    log: list[float] = []

    async def fails() -> None:
        raise RuntimeError("the database is down")

    first = _Holder(lane, 0.0, log)
    await _settle()
    with pytest.raises(RuntimeError):
        async with lane.turn(key=1.0, before_waiting=fails):
            pass
    assert lane.waiting == 0 and lane.quiet.is_set()
    later = _Holder(lane, 2.0, log)
    await _settle()
    first.go.set()
    later.go.set()
    await asyncio.gather(first.task, later.task)
    assert log == [0.0, 2.0] and lane.holders == 0
