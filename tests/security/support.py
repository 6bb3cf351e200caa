"""Helpers for the security suite: API credentials and WebSocket connections."""

from __future__ import annotations

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
    "receive_until_final",
    "scoped_socket",
    "session_cookie",
    "session_socket",
]
