"""The WebSocket transport: relays an answer's stream (answers.streams); no business logic.

Messages in: ``ask`` (question, conversation_id), ``resume`` (answer_id, after: the last
``seq`` received) and ``stop``. Messages out: the stream's events, each with its ``seq``.
Following runs as a task, never inside ``receive_json`` (Channels handles one message at
a time, so awaiting the stream there would leave "stop" unread until the answer ended).
A disconnect ends the following, not the generation: the answer belongs to itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, TypeGuard

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import pipeline, selectors, streams
from .auth import SOCKET_DATABASE_UNAVAILABLE
from .conf import answers_settings
from .events import ErrorEvent
from .panels import render_event_sources_panel

logger = logging.getLogger(__name__)

# A question of MAX_QUESTION_LENGTH characters, JSON-escaped, fits with room to spare:
# ASCII-only JSON (``json.dumps``' default) writes a character outside the BMP as a
# surrogate pair, "\\ud83d\\ude00", 12 characters for one.
ESCAPED_CHARACTER_MAX = 12
MESSAGE_OVERHEAD_BYTES = 1024
SIGNED_OUT_MESSAGE = "Your session has ended. Please log in again."
FORBIDDEN_MESSAGE = "You do not have permission to ask questions."


class AnswerConsumer(AsyncJsonWebsocketConsumer):
    # The socket itself joins no group (answers.streams subscribes per answer followed), so
    # it takes no channel of its own: an alias that is not in CHANNEL_LAYERS means none,
    # and no receive per socket is left waiting on Redis.
    channel_layer_alias = "answers-consumer-needs-no-layer"
    task: asyncio.Task[None] | None = None
    # The answer this socket follows, once known; "stop" applies to it.
    answer_id: int | None = None
    stop_requested = False
    # The followed stream has sent its last event.
    settled = False

    async def connect(self) -> None:
        if self.scope.get(SOCKET_DATABASE_UNAVAILABLE):
            await self._unavailable()
            return
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(SIGNED_OUT_MESSAGE, "signed_out", close_code=4401)
            return
        try:
            can_ask = await database_sync_to_async(selectors.user_can_ask)(user=user)
        except pipeline.DATABASE_ERRORS:
            logger.exception("Reading the user of a socket failed")
            await self._unavailable()
            return
        if not can_ask:
            await self._refuse(FORBIDDEN_MESSAGE, "forbidden", close_code=4403)
            return
        await self.accept()

    async def _unavailable(self) -> None:
        """The database cannot be reached: said, then closed with 4503."""
        await self._refuse(pipeline.DATABASE_UNAVAILABLE_MESSAGE, "unavailable", close_code=4503)

    async def _refuse(self, message: str, code: str, *, close_code: int) -> None:
        """Accepted only to say why, then closed with ``close_code`` (a 4 before the HTTP
        status). Not refused at the handshake: a browser sees that only as a connection
        that failed (1006), like a server that is gone, and would retry it forever; the
        page reads these codes (4401: log in again, 4403: stop trying)."""
        await self.accept()
        await self._error(message, code, last=True)
        await self.close(code=close_code)

    async def disconnect(self, code: int) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None:
            await self._error("Send JSON text messages.", "bad_message")
            return
        limit = (
            int(answers_settings.MAX_QUESTION_LENGTH) * ESCAPED_CHARACTER_MAX
            + MESSAGE_OVERHEAD_BYTES
        )
        if len(text_data) > limit:
            await self._error("The message is too large.", "too_large")
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            # RecursionError: a small frame of deeply nested arrays (``[[[[...]]]]``)
            # exhausts the parser's stack; it is a bad frame like any other.
            await self._error("The message is not valid JSON.", "bad_message")
            return
        if not isinstance(content, dict):
            await self._error("The message must be a JSON object.", "bad_message")
            return
        await self.receive_json(content)

    async def receive_json(self, content: dict[str, Any], **kwargs: Any) -> None:
        kind = content.get("type")
        if kind == "ask":
            await self._ask(content)
        elif kind == "resume":
            await self._resume(content)
        elif kind == "stop":
            await self._stop()
        else:
            await self._error(
                "Unknown message type; send 'ask', 'resume' or 'stop'.", "bad_message"
            )

    def _busy(self) -> bool:
        # Free as soon as the last event is sent: the follower may still be leaving its
        # group, and a client that asks again at once must not hear "busy".
        return self.task is not None and not self.task.done() and not self.settled

    async def _ask(self, content: dict[str, Any]) -> None:
        if self._busy():
            await self._error(
                "A question is already being answered; wait for it or send 'stop'.", "busy"
            )
            return
        conversation_id = None
        raw_conversation = content.get("conversation_id")
        if raw_conversation not in (None, ""):
            try:
                conversation_id = uuid.UUID(str(raw_conversation))
            except ValueError:
                await self._error("conversation_id must be a UUID.", "invalid")
                return
        self.answer_id, self.stop_requested, self.settled = None, False, False
        self.task = asyncio.create_task(self._answer(content.get("question"), conversation_id))

    async def _resume(self, content: dict[str, Any]) -> None:
        if self._busy():
            await self._error("This socket already follows an answer; send 'stop'.", "busy")
            return
        answer_id, after = content.get("answer_id"), content.get("after", 0)
        if not _is_count(answer_id, minimum=1):
            await self._error("answer_id must be a positive integer.", "invalid")
            return
        if not _is_count(after, minimum=0):
            await self._error("after must be a sequence number (0 or more).", "invalid")
            return
        self.answer_id, self.stop_requested, self.settled = None, False, False
        self.task = asyncio.create_task(self._follow(answer_id, after))

    async def _user_now(self) -> Any:
        """The user as of now, or None after telling the client why it gets nothing."""
        # A socket can outlive a session, an account or a group: re-read at each ask.
        session_key = getattr(self.scope.get("session"), "session_key", None)
        try:
            user = await database_sync_to_async(selectors.user_get_current)(
                user_id=self.scope["user"].pk, session_key=session_key
            )
        except pipeline.DATABASE_ERRORS:
            logger.exception("Reading the user of a socket failed")
            await self._error(pipeline.DATABASE_UNAVAILABLE_MESSAGE, "unavailable", last=True)
            return None
        except Exception:
            # The ask or resume must still end with a reply, not leave the client waiting.
            logger.exception("Reading the user of a socket failed")
            await self._error(pipeline.GENERIC_ERROR, "failed", last=True)
            return None
        if user is None:
            await self._error(SIGNED_OUT_MESSAGE, "signed_out", last=True)
            await self.close(code=4401)
            return None
        self.scope["user"] = user
        return user

    async def _answer(self, question: object, conversation_id: uuid.UUID | None) -> None:
        # The user check is part of preparing the question: in its turn, oldest ask first.
        async with pipeline.preparing_lane().turn():
            user = await self._user_now()
            if user is None:
                return
            try:
                asked = await streams.answer_stream_begin(
                    user=user, question=question, conversation_id=conversation_id
                )
            except pipeline.AskRefused as exc:
                await self._error(exc.message, exc.code, last=True)
                return
            except Exception:
                # A bug must still end the ask with a reply, not leave the client waiting.
                logger.exception("Starting an answer failed")
                await self._error(pipeline.GENERIC_ERROR, "failed", last=True)
                return
        # Only now may "stop" go to the answer: before, the generation was not listening.
        self.answer_id = asked.answer_id
        await self._stop_if_requested(asked.answer_id, user)
        await self._relay(asked.answer_id, asked.events, user=user)

    async def _follow(self, answer_id: int, after: int) -> None:
        user = await self._user_now()
        if user is not None:
            events = streams.answer_stream_follow(answer_id=answer_id, user=user, after=after)
            await self._relay(answer_id, events, user=user)

    async def _relay(
        self, answer_id: int, events: AsyncGenerator[streams.StreamEvent, None], *, user: Any
    ) -> None:
        try:
            async with aclosing(events):
                async for event in events:
                    if self.answer_id is None:
                        # The first event of a resumed answer: it is the user's (the follow
                        # has checked), so a "stop" that came before it goes to it now.
                        self.answer_id = answer_id
                        await self._stop_if_requested(answer_id, user)
                    message = event.to_dict()
                    panel = render_event_sources_panel(event.event)
                    if panel is not None:
                        message["sources_html"] = panel
                    # Before sending: the client may ask again the moment it has it.
                    self.settled = self.settled or event.terminal
                    await self.send_json(message)
        except pipeline.AskRefused as exc:
            await self._error(exc.message, exc.code, last=True)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("Relaying answer %s failed", answer_id)
            await self._error(pipeline.GENERIC_ERROR, "failed", last=True)

    async def _stop(self) -> None:
        if not self._busy():
            await self._error("Nothing is being answered.", "idle")
            return
        if self.answer_id is None:
            self.stop_requested = True
            return
        await self._stop_answer(self.answer_id, self.scope["user"])

    async def _stop_if_requested(self, answer_id: int, user: Any) -> None:
        if self.stop_requested:  # "stop" came before the answer could take it
            self.stop_requested = False
            await self._stop_answer(answer_id, user)

    async def _stop_answer(self, answer_id: int, user: Any) -> None:
        # Whichever process generates it stops; its "done" reaches this socket's stream.
        try:
            await streams.answer_stream_stop(answer_id=answer_id, user=user)
        except streams.AnswerNotStreaming:
            pass  # it has just ended: that "done" is on its way already
        except pipeline.AskRefused as exc:  # e.g. not found: access lost since the ask
            await self._error(exc.message, exc.code)
        except Exception:
            # A frame handler must not die with it: the socket stays open.
            logger.exception("Stopping answer %s failed", answer_id)
            await self._error(pipeline.GENERIC_ERROR, "failed")

    async def _error(self, message: str, code: str, *, last: bool = False) -> None:
        """``last``: the final word of the task that asks or follows (it is free now)."""
        self.settled = self.settled or last
        await self.send_json(ErrorEvent(message, answer_id=self.answer_id, code=code).to_dict())


def _is_count(value: object, *, minimum: int) -> TypeGuard[int]:
    """A JSON integer a database id column can hold (not a bool, a float or a string)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and minimum <= value <= selectors.MAX_ID
    )
