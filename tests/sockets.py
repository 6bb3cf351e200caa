"""WebSocket helpers shared by the consumer, fault and security tests."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application

ORIGIN = (b"origin", b"http://testserver")


async def session_socket(
    client: Client, user: Any, *, origin: tuple[bytes, bytes] | None = ORIGIN
) -> WebsocketCommunicator:
    """A socket through the real middleware stack, authenticated by a session cookie."""
    await database_sync_to_async(client.force_login)(user)
    cookie = client.cookies["sessionid"].value
    headers = [(b"host", b"testserver"), (b"cookie", f"sessionid={cookie}".encode())]
    if origin is not None:
        headers.append(origin)
    return WebsocketCommunicator(application, "/ws/answers/", headers=headers)


def scoped_socket(user: Any) -> WebsocketCommunicator:
    """A socket whose scope already holds ``user`` (what the auth middleware would set)."""
    comm = WebsocketCommunicator(
        application, "/ws/answers/", headers=[(b"host", b"testserver"), ORIGIN]
    )
    comm.scope["user"] = user
    return comm


async def receive_until_final(comm: WebsocketCommunicator, timeout: float = 5) -> list[dict]:
    messages = []
    while True:
        message = await comm.receive_json_from(timeout=timeout)
        messages.append(message)
        if message["type"] in ("done", "error"):
            return messages
