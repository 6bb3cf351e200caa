"""N WebSocket clients in one process: ``python -m bench.ws_clients < spec.json``.

Run apart from the benchmark process because Django's daphne app pins txaio (and so
autobahn) to Twisted there, and autobahn's asyncio client is the one installed
(``websockets`` is not a dependency). Every client connects first; then all ask at once,
and the clock runs from that moment to the last close, so handshakes and daphne's listen
backlog do not blur the streaming figure.

The spec is ``{"url", "origin", "cookies": [...], "messages": [...], "timeout"}``; the
answer, on stdout, is ``{"seconds", "streams": [{"tokens", "chars", "outcome", "first_ms",
"error", "gaps"}, ...]}`` (``outcome``: the ``done``'s status, or ``error`` with ``error``
its code and message, or "" if the socket closed first).
``gaps`` lists, for each ``t<time.time()>`` stamp in the token text (``bench.providers``),
arrival minus emission in ms, the arrival being that of the message completing the stamp.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlparse

from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

HANDSHAKES_AT_ONCE = 32
# The moment every client was let go (perf_counter), for first-token times.
_started = [0.0]
# Emitted with 6 decimals, so a stamp is complete once it has all six.
_STAMP = re.compile(r"t(\d+\.\d{6})")


@dataclass
class Stream:
    tokens: int = 0
    chars: int = 0
    outcome: str = ""
    # From the common start to this socket's first token (ms); None: no token came.
    first_ms: float | None = None
    # An error event's code and message.
    error: str = ""
    gaps: list[float] = field(default_factory=list)
    pending: str = field(default="", repr=False)


@dataclass
class _Client:
    stream: Stream
    message: bytes
    go: asyncio.Event
    opened: asyncio.Future[None] = field(default_factory=asyncio.Future)
    closed: asyncio.Future[None] = field(default_factory=asyncio.Future)


class _Protocol(WebSocketClientProtocol):
    """Waits for the common start, asks once, counts tokens until ``done`` or ``error``.

    Per-client state lives on its factory (autobahn builds the protocol itself).
    """

    def onOpen(self) -> None:
        self.factory.client.opened.set_result(None)
        self._asking = asyncio.ensure_future(self._ask())

    async def _ask(self) -> None:
        client = self.factory.client
        await client.go.wait()
        self.sendMessage(client.message)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        message = json.loads(payload)
        stream = self.factory.client.stream
        if message.get("type") == "token":
            arrival = time.time()
            if stream.first_ms is None:
                stream.first_ms = round((time.perf_counter() - _started[0]) * 1000, 3)
            text = message.get("text", "")
            stream.tokens += 1
            stream.chars += len(text)
            if "t" in text or stream.pending:
                stream.pending += text
                end = 0
                for match in _STAMP.finditer(stream.pending):
                    stream.gaps.append(round((arrival - float(match.group(1))) * 1000, 3))
                    end = match.end()
                # Keep only what may still be the start of a stamp.
                rest = stream.pending[end:]
                start = rest.rfind("t")
                stream.pending = rest[start:] if start >= 0 else ""
        elif message.get("type") in ("done", "error"):
            stream.outcome = message.get("status") or message["type"]
            if message["type"] == "error":
                stream.error = f"{message.get('code')}: {message.get('message')}"
            self.sendClose()

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        client = self.factory.client
        for future in (client.opened, client.closed):
            if not future.done():
                future.set_result(None)


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    address = urlparse(spec["url"])
    go = asyncio.Event()
    gate = asyncio.Semaphore(HANDSHAKES_AT_ONCE)
    clients: list[_Client] = []

    async def connect(cookie: str, message: str) -> None:
        client = _Client(Stream(), message.encode(), go)
        clients.append(client)
        headers = {"Cookie": f"sessionid={cookie}"} if cookie else {}
        factory = WebSocketClientFactory(spec["url"], origin=spec["origin"], headers=headers)
        factory.protocol = _Protocol
        factory.client = client
        async with gate:
            await loop.create_connection(factory, address.hostname, address.port)
            await client.opened

    pairs = zip(spec["cookies"], spec["messages"], strict=True)
    await asyncio.gather(*(connect(cookie, message) for cookie, message in pairs))
    start = _started[0] = time.perf_counter()
    go.set()
    await asyncio.gather(*(client.closed for client in clients))
    return {
        "seconds": time.perf_counter() - start,
        "streams": [_public(client.stream) for client in clients],
    }


def _public(stream: Stream) -> dict[str, Any]:
    data = asdict(stream)
    del data["pending"]
    return data


def main() -> None:
    spec = json.load(sys.stdin)
    result = asyncio.run(asyncio.wait_for(run(spec), spec.get("timeout", 90)))
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
