"""The streaming baseline: a bare Channels app whose one consumer, when a client sends
anything, answers with K text frames and closes. No auth, no database, no pipeline.

    daphne bench.bare_asgi:application      # ws://HOST:PORT/?frames=K&chars=C
                                            # or ?frames=K&stamp=1&pace=SECONDS

With ``stamp=1`` each frame's text is its emission time, as ``bench.providers`` stamps
tokens; ``pace`` sleeps between frames (0: only yield to the loop, as the providers do).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
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
        if query.get("stamp", ["0"])[0] == "1":
            pace = float(query.get("pace", ["0"])[0])
            for _ in range(frames):
                text = f"t{time.time():.6f} "
                await self.send(text_data=json.dumps({"type": "token", "text": text}))
                await asyncio.sleep(pace)
            await self.send(text_data=json.dumps({"type": "done"}))
            await self.close()
            return
        # Frames shaped like the app's token events, so both sides move the same bytes.
        token = json.dumps({"type": "token", "text": "x" * chars})
        for _ in range(frames):
            await self.send(text_data=token)
        await self.send(text_data=json.dumps({"type": "done"}))
        await self.close()


application = ProtocolTypeRouter({"websocket": FramesConsumer.as_asgi()})
