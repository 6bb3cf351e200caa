"""What other processes tell the answers generated here, on one channel per event loop.

A stop asked on another process, and a follower there saying it listens, are sent to one
group that every generating process's listener belongs to; the listener hands each
message to the answer it names. Before, every answer joined a group of its own, kept a
receive waiting on a channel of its own, woke and left it at its end (about eleven Redis
round trips an answer), and asked the cache every half second whether a follower
elsewhere had come (ADR 0037). Stops and followers elsewhere are rare; answers are not.

The listener runs while answers are generated on its loop: the first answer starts it
(joins the group), the last one to end stops it (leaves the group), so nothing outlives
the loop that owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from typing import Any, Protocol

from .log import WAKE, layer, stream_mark_followed

logger = logging.getLogger("answers.streams")

CONTROL_GROUP = "answers.control"
STOP = "answer.stop"
FOLLOWED = "answer.followed"
# Group members older than the layer's group expiry (a day by default) are dropped:
# a listener that lives longer joins again now and then.
REJOIN_SECONDS = 600.0
# A message for an answer not (yet) registered here is kept this long, at most this many.
EARLY_SECONDS = 60.0
EARLY_LIMIT = 1_000
# After the layer failed under the listener: first wait, and the most it waits.
RETRY_SECONDS = (1.0, 30.0)


class Controlled(Protocol):
    """An answer generated here, as the listener sees it."""

    def on_stop(self) -> None: ...

    def on_followed(self) -> None: ...


def _deliver(target: Controlled, kind: str) -> None:
    if kind == STOP:
        target.on_stop()
    elif kind == FOLLOWED:
        target.on_followed()


class Control:
    """The listener of one event loop and the answers registered with it."""

    def __init__(self) -> None:
        self.users = 0
        self.lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None
        self.channel = ""
        self.closing = False
        # False while the layer is failing under the listener: answers then ask the cache
        # whether a follower elsewhere has come, as they did before (ADR 0037).
        self.healthy = False
        self.targets: dict[str, Controlled] = {}
        self.early: dict[str, tuple[float, set[str]]] = {}

    async def acquire(self) -> None:
        """Hold the listener for one answer, starting it if need be; raises when the
        layer cannot be reached (the answer cannot be streamed)."""
        async with self.lock:
            if self.task is None:
                await self._start()
            self.users += 1

    async def release(self) -> None:
        self.users -= 1
        if self.users:
            return
        async with self.lock:
            if self.users == 0 and self.task is not None:
                await self._stop()

    def attach(self, stream: str, target: Controlled) -> None:
        """Deliver ``stream``'s messages to ``target`` from now on, and any that came
        before it was registered here."""
        self.targets[stream] = target
        _, kinds = self.early.pop(stream, (0.0, set()))
        for kind in sorted(kinds):
            _deliver(target, kind)

    def detach(self, stream: str) -> None:
        self.targets.pop(stream, None)

    async def _join(self) -> None:
        channel_layer = layer()
        self.channel = await channel_layer.new_channel()
        await channel_layer.group_add(CONTROL_GROUP, self.channel)
        self.healthy = True

    async def _start(self) -> None:
        await self._join()
        self.closing = False
        # A fresh context: the listener outlives the request that started it.
        self.task = asyncio.create_task(
            self._listen(), name="answers-control", context=contextvars.Context()
        )

    async def _stop(self) -> None:
        task, channel = self.task, self.channel
        self.task = None
        self.closing = True
        self.healthy = False
        channel_layer = layer()
        if task is not None and not task.done():
            # Woken with a message, not cancelled: channels-redis lets a cancelled
            # receive go only when its blocking pop times out (log.end_receive).
            with contextlib.suppress(Exception):
                await channel_layer.send(channel, WAKE)
            _, late = await asyncio.wait({task}, timeout=1.0)
            if late:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(Exception):
            await channel_layer.group_discard(CONTROL_GROUP, channel)

    async def _listen(self) -> None:
        channel_layer = layer()
        retry = RETRY_SECONDS[0]
        failed = False
        while not self.closing:
            receive: asyncio.Future[Any] | None = None
            try:
                if failed:  # a new channel, joined again (until that succeeds)
                    await self._join()
                    failed = False
                receive = asyncio.ensure_future(channel_layer.receive(self.channel))
                while not self.closing:
                    done, _ = await asyncio.wait({receive}, timeout=REJOIN_SECONDS)
                    if not done:
                        await channel_layer.group_add(CONTROL_GROUP, self.channel)
                        continue
                    message = receive.result()
                    retry = RETRY_SECONDS[0]
                    self.dispatch(message)
                    if not self.closing:
                        receive = asyncio.ensure_future(channel_layer.receive(self.channel))
                return
            except asyncio.CancelledError:
                if receive is not None:
                    receive.cancel()
                raise
            except Exception as exc:
                # Stops from elsewhere are lost until it is back; followers elsewhere are
                # still noticed through the cache.
                self.healthy, failed = False, True
                if receive is not None and not receive.done():
                    receive.cancel()
                logger.warning("The answers' control channel failed (%r); retrying", exc)
                with contextlib.suppress(Exception):
                    await channel_layer.group_discard(CONTROL_GROUP, self.channel)
                await asyncio.sleep(retry)
                retry = min(retry * 2, RETRY_SECONDS[1])

    def dispatch(self, message: dict[str, Any]) -> None:
        """Hand ``message`` to the answer it names (kept a while if it is not here yet)."""
        kind, stream = message.get("type"), message.get("stream")
        if kind not in (STOP, FOLLOWED) or not isinstance(stream, str):
            return  # a wake-up, or a message of a newer or older version
        target = self.targets.get(stream)
        if target is not None:
            _deliver(target, kind)
            return
        now = time.monotonic()
        for name, (when, _) in list(self.early.items()):
            if now - when > EARLY_SECONDS or len(self.early) >= EARLY_LIMIT:
                del self.early[name]
        self.early.setdefault(stream, (now, set()))[1].add(kind)


# One per event loop: asyncio's locks and tasks belong to one, and tests run several.
_controls: dict[asyncio.AbstractEventLoop, Control] = {}


def control_for_loop() -> Control:
    loop = asyncio.get_running_loop()
    control = _controls.get(loop)
    if control is None:
        for old in [old for old in _controls if old.is_closed()]:
            del _controls[old]
        control = _controls[loop] = Control()
    return control


async def control_send(*, stream: str, kind: str) -> None:
    """Tell whichever process generates ``stream`` (every listener hears it)."""
    await layer().group_send(CONTROL_GROUP, {"type": kind, "stream": stream})


async def stream_announce_follower(stream: str) -> None:
    """Say that a process other than the generating one follows ``stream``: in the cache
    (read by a generation that starts or ends meanwhile) and to the generating process."""
    await stream_mark_followed(stream)
    await control_send(stream=stream, kind=FOLLOWED)
