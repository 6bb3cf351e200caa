"""Helpers for the security suite: API credentials and WebSocket connections."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from answers import services
from tests.sockets import ORIGIN, receive_until_final, scoped_socket, session_socket

__all__ = [
    "ORIGIN",
    "bearer",
    "post_json",
    "receive_until_final",
    "scoped_socket",
    "session_socket",
]


def bearer(user: Any) -> dict[str, str]:
    _, raw = services.api_token_create(user=user, name="security-test")
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def post_json(client: Client, path: str, body: object, **headers: str) -> Any:
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)
