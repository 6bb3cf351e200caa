"""The streaming baseline: a bare Channels app whose one consumer, when a client sends
anything, answers with K text frames and closes. No auth, no database, no pipeline.

    daphne bench.bare_asgi:application      # ws://HOST:PORT/?frames=K&chars=C
"""

from __future__ import annotations

import json
import os
from urllib.parse import parse_qs

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter  # noqa: E402


class FramesConsumer(AsyncWebsocketConsumer):
    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        query = parse_qs(self.scope["query_string"].decode())
        frames = int(query.get("frames", ["30"])[0])
        chars = int(query.get("chars", ["16"])[0])
        # Frames shaped like the app's token events, so both sides move the same bytes.
        token = json.dumps({"type": "token", "text": "x" * chars})
        for _ in range(frames):
            await self.send(text_data=token)
        await self.send(text_data=json.dumps({"type": "done"}))
        await self.close()


application = ProtocolTypeRouter({"websocket": FramesConsumer.as_asgi()})
