"""The WebSocket transport: iterates the pipeline; no business logic here.

Generation runs as a task, never inside ``receive_json`` (Channels handles one message at
a time, so awaiting the stream there would leave "stop" unread until the answer ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from importlib import import_module
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model

from . import pipeline, selectors
from .conf import answers_settings
from .panels import FINAL, PROVISIONAL, render_sources_panel

logger = logging.getLogger(__name__)

# A question of MAX_QUESTION_LENGTH characters, JSON-escaped, fits with room to spare.
MESSAGE_OVERHEAD_BYTES = 1024


class AnswerConsumer(AsyncJsonWebsocketConsumer):
    task: asyncio.Task[None] | None = None
    run: pipeline.AnswerRun | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(selectors.user_can_ask)(user=user):
            await self.close(code=4403)
            return
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self._cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None:
            await self._error("Send JSON text messages.", "bad_message")
            return
        limit = int(answers_settings.MAX_QUESTION_LENGTH) * 6 + MESSAGE_OVERHEAD_BYTES
        if len(text_data) > limit:
            await self._error("The message is too large.", "too_large")
            return
        try:
            content = json.loads(text_data)
        except ValueError:
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
        elif kind == "stop":
            await self._stop()
        else:
            await self._error("Unknown message type; send 'ask' or 'stop'.", "bad_message")

    async def _ask(self, content: dict[str, Any]) -> None:
        if self.task is not None and not self.task.done():
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
        self.run = None
        self.task = asyncio.create_task(self._answer(content.get("question"), conversation_id))

    def _current_user(self) -> Any:
        """The asker as of now: a socket can outlive a session, an account or a group."""
        user = self.scope["user"]
        session = self.scope.get("session")
        key = getattr(session, "session_key", None)
        if key is not None:
            # A fresh load: an expired or deleted session comes back empty.
            store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
            if str(store.load().get(SESSION_KEY)) != str(user.pk):
                return None
        return get_user_model().objects.filter(pk=user.pk, is_active=True).first()

    async def _answer(self, question: object, conversation_id: uuid.UUID | None) -> None:
        user = await database_sync_to_async(self._current_user)()
        if user is None:
            await self._error("Your session has ended. Please log in again.", "signed_out")
            await self.close(code=4401)
            return
        self.scope["user"] = user
        try:
            self.run = await pipeline.start_answer(
                user=user, question=question, conversation_id=conversation_id
            )
        except pipeline.AskRefused as exc:
            await self._error(exc.message, exc.code)
            return
        answer_id = self.run.answer.pk
        try:
            window = int(answers_settings.STREAM_COALESCE_MS) / 1000
            async for event in pipeline.coalesced(self.run.events(), window=window):
                message = {"type": event.type, **event.as_dict()}
                if isinstance(event, pipeline.ReferencesEvent):
                    message["sources_html"] = render_sources_panel(
                        references=event.references, answer_id=answer_id, state=PROVISIONAL
                    )
                elif isinstance(event, pipeline.DoneEvent):
                    message["sources_html"] = render_sources_panel(
                        references=event.answer.references, answer_id=answer_id, state=FINAL
                    )
                await self.send_json(message)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("Streaming answer %s failed", answer_id)
            await self._error(pipeline.GENERIC_ERROR, "failed")

    async def _stop(self) -> None:
        run = self.run
        if self.task is None or self.task.done():
            await self._error("Nothing is being answered.", "idle")
            return
        await self._cancel()
        if run is None:
            return
        # The pipeline stored the partial answer as interrupted; send it as the last word.
        payload = await database_sync_to_async(self._stored_payload)(run.answer.pk)
        await self.send_json(
            {
                "type": "done",
                **payload.as_dict(),
                "number_map": {},
                "sources_html": render_sources_panel(
                    references=payload.references, answer_id=payload.answer_id, state=FINAL
                ),
            }
        )

    def _stored_payload(self, answer_id: int) -> Any:
        user = self.scope["user"]
        answer = selectors.answer_get_for_user(answer_id=answer_id, user=user)
        return selectors.answer_payload(answer=answer, user=user)

    async def _cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _error(self, message: str, code: str) -> None:
        answer_id = self.run.answer.pk if self.run is not None else None
        await self.send_json(
            {"type": "error", "message": message, "code": code, "answer_id": answer_id}
        )
