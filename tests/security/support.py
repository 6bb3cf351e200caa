"""Helpers for the security suite: API credentials and WebSocket connections."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from tests.helpers import bearer
from tests.sockets import (
    ORIGIN,
    live_receive_until_final,
    live_socket,
    receive_until_final,
    scoped_socket,
    session_cookie,
    session_socket,
)

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
