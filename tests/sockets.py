"""WebSocket helpers shared by the consumer, fault and security tests.

Every test socket is built here: ``scoped_socket`` (the user already in the scope),
``session_socket`` (a real session cookie through the middleware stack) and, for a
handshake a test means to get wrong, ``raw_socket`` with exactly the headers given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application

PATH = "/ws/answers/"
HOST = b"testserver"
ORIGIN = (b"origin", b"http://testserver")

Header = tuple[bytes, bytes]


def raw_socket(headers: Iterable[Header], *, path: str = PATH) -> WebsocketCommunicator:
    """A socket whose handshake carries exactly ``headers`` (nothing added)."""
    return WebsocketCommunicator(application, path, headers=list(headers))


def _headers(origin: Header | None, host: bytes, extra: Iterable[Header]) -> list[Header]:
    headers = [(b"host", host), *extra]
    if origin is not None:
        headers.append(origin)
    return headers


def scoped_socket(
    user: Any = None,
    *,
    origin: Header | None = ORIGIN,
    host: bytes = HOST,
    path: str = PATH,
) -> WebsocketCommunicator:
    """A socket whose scope already holds ``user`` (what the auth middleware would set;
    ``None``: left to the middleware)."""
    comm = raw_socket(_headers(origin, host, ()), path=path)
    if user is not None:
        comm.scope["user"] = user
    return comm


async def session_socket(
    client: Client, user: Any, *, origin: Header | None = ORIGIN, path: str = PATH
) -> WebsocketCommunicator:
    """A socket through the real middleware stack, authenticated by a session cookie."""
    await database_sync_to_async(client.force_login)(user)
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())
    return raw_socket(_headers(origin, HOST, [cookie]), path=path)


async def receive_until_final(comm: WebsocketCommunicator, timeout: float = 30) -> list[dict]:
    messages = []
    while True:
        message = await comm.receive_json_from(timeout=timeout)
        messages.append(message)
        if message["type"] in ("done", "error"):
            return messages


async def ask_on(comm: WebsocketCommunicator, question: str, timeout: float = 30) -> list[dict]:
    """Ask ``question`` on an open socket: every message up to the final one."""
    await comm.send_json_to({"type": "ask", "question": question})
    return await receive_until_final(comm, timeout=timeout)


async def connected(comm: WebsocketCommunicator) -> WebsocketCommunicator:
    """``comm``, connected (asserted)."""
    accepted, code = await comm.connect(timeout=30)
    assert accepted, f"the socket was refused ({code})"
    return comm


# --- real sockets on a live server (tests/live.py) ---------------------------------------


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
        f"{server.ws_url}{PATH}",
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
