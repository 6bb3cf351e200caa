"""Helpers for the security suite: API credentials and WebSocket connections."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from django.test import Client

from tests.helpers import bearer
from tests.sockets import ORIGIN, receive_until_final, scoped_socket, session_socket

__all__ = [
    "ORIGIN",
    "bearer",
    "live_receive_until_final",
    "live_socket",
    "post_json",
    "receive_until_final",
    "scoped_socket",
    "session_cookie",
    "session_socket",
]


def post_json(client: Client, path: str, body: object, **headers: str) -> Any:
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


def session_cookie(user: Any) -> str:
    """A ``Cookie`` header for ``user``: the session is stored in the database, so a live
    server (tests/live.py) knows it."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


async def live_socket(server: Any, cookie: str, *, origin: str | None = None) -> Any:
    """A real WebSocket client on ``server``'s socket, from ``origin`` (default: its own)."""
    from websockets.asyncio.client import connect

    return await connect(
        f"{server.ws_url}/ws/answers/",
        origin=origin or server.url,
        additional_headers={"Cookie": cookie},
        open_timeout=10,
    )


async def live_receive_until_final(socket: Any, timeout: float = 10) -> list[dict]:
    messages = []
    while True:
        message = json.loads(await asyncio.wait_for(socket.recv(), timeout))
        messages.append(message)
        if message["type"] in ("done", "error"):
            return messages
