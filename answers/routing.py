from __future__ import annotations

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from .consumers import AnswerConsumer

websocket_urlpatterns = [path("ws/answers/", AnswerConsumer.as_asgi())]


class NoSuchSocket(AsyncWebsocketConsumer):
    """Refuses the handshake (403), as a socket to an unknown path should be refused:
    Channels' router raises for a path it has no route to, which the server logs as an
    application error and the client sees as a failed handshake all the same."""

    async def connect(self) -> None:
        await self.close()


# The project's router ends with this (config/asgi.py), after every app's own routes.
websocket_not_found = re_path(r"", NoSuchSocket.as_asgi())
