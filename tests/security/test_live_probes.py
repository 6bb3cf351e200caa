"""Probes of issue 14 replayed against the real app under daphne (tests/live.py), with real
HTTP (httpx) and WebSocket (websockets) clients: bad input gets a coded refusal and loses
nothing, and only the site's own origin may open a socket."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import sync_to_async
from websockets.exceptions import InvalidStatus

from answers.models import Question
from tests.helpers import assert_json_error, bearer_headers
from tests.sockets import live_receive_until_final, live_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

LAMBDA = "What is a lambda expression?"
# Written by hand: json.dumps would escape it the same way, but this is the probe's exact body.
SURROGATE_BODY = b'{"question": "lambda \\ud800 x"}'


# --- (5) an unpaired surrogate is refused with a code, before anything is stored ---------


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_an_unpaired_surrogate_is_a_422_over_http(daphne_live_server, asker, accept):
    headers = {**bearer_headers(asker), "Accept": accept, "Content-Type": "application/json"}
    before = Question.objects.count()
    response = httpx.post(
        f"{daphne_live_server.url}/api/answers", content=SURROGATE_BODY, headers=headers,
        timeout=20,
    )  # fmt: skip
    assert_json_error(response, 422, "invalid_question")
    assert Question.objects.count() == before


async def test_an_unpaired_surrogate_gets_an_error_on_the_socket(daphne_live_server, asker):
    cookie = await sync_to_async(session_cookie)(asker)
    before = await Question.objects.acount()
    async with await live_socket(daphne_live_server, cookie) as socket:
        await socket.send('{"type": "ask", "question": "lambda \\ud800 x"}')
        messages = await live_receive_until_final(socket)
        assert [(m["type"], m["code"]) for m in messages] == [("error", "invalid_question")]
        assert await Question.objects.acount() == before
        # The socket still answers.
        await socket.send(json.dumps({"type": "ask", "question": LAMBDA}))
        assert (await live_receive_until_final(socket))[-1]["type"] == "done"


# --- (6) a deeply nested frame is a bad frame like any other -----------------------------


async def test_a_deeply_nested_frame_gets_an_error_and_the_socket_stays_usable(
    daphne_live_server, asker
):
    cookie = await sync_to_async(session_cookie)(asker)
    async with await live_socket(daphne_live_server, cookie) as socket:
        for frame in ("[" * 5000 + "]" * 5000, '{"a":' * 2000 + "1" + "}" * 2000):
            await socket.send(frame)
            messages = await live_receive_until_final(socket)
            assert [(m["type"], m["code"]) for m in messages] == [("error", "bad_message")]
        await socket.send(json.dumps({"type": "ask", "question": LAMBDA}))
        assert (await live_receive_until_final(socket))[-1]["type"] == "done"


# --- (7) the socket's Origin check compares scheme, host and port ------------------------


def _foreign_origins(port: int) -> list[str]:
    return [
        "http://localhost:1",  # another port of an allowed host (the probe)
        "https://127.0.0.1",  # another scheme and port (the probe)
        f"https://127.0.0.1:{port}",  # another scheme
        f"http://127.0.0.1:{port + 1}",  # another port
        f"http://localhost:{port}",  # another host, though an allowed one
        f"http://127.0.0.1.evil.example:{port}",  # another host
        "null",
    ]


async def test_a_socket_from_another_scheme_or_port_is_refused(daphne_live_server, asker):
    cookie = await sync_to_async(session_cookie)(asker)
    refused = []
    for origin in _foreign_origins(daphne_live_server.port):
        try:
            socket = await live_socket(daphne_live_server, cookie, origin=origin)
        except InvalidStatus as exc:
            assert exc.response.status_code == 403
            refused.append(origin)
        else:
            await socket.close()
    assert refused == _foreign_origins(daphne_live_server.port)
    # The control: the same cookie from the site's own origin is served.
    async with await live_socket(daphne_live_server, cookie, origin=daphne_live_server.url) as s:
        await s.send(json.dumps({"type": "ask", "question": LAMBDA}))
        assert (await live_receive_until_final(s))[-1]["type"] == "done"
