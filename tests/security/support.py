"""Helpers for the security suite: API credentials and WebSocket connections."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from answers import services
from config.asgi import application

ORIGIN = (b"origin", b"http://testserver")


def bearer(user: Any) -> dict[str, str]:
    _, raw = services.api_token_create(user=user, name="security-test")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def post_json(client: Client, path: str, body: object, **headers: str) -> Any:
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


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
