"""Redis going away and coming back, under a real daphne server (tests/live.py) whose
channel layer and stream log live on a redis-server of this module's own (stopped and
started again by the tests; the machine's Redis is never touched).

What a client relies on: whatever it asks while Redis is away is refused with a clear
status or event, a stream it follows ends with an ``error`` event (never a connection
left open with nothing more to come), and once Redis is back the same answer can be
followed again.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from answers import pipeline
from answers.models import Answer
from tests.helpers import assert_json_error, bearer_headers, sse_events, started_run
from tests.live import LiveServer, run_live_server
from tests.sockets import live_receive_until_final, live_socket, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

QUESTION = "What is a lambda expression?"
SSE = {"Accept": "text/event-stream"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OwnRedis:
    """A redis-server process of this module, on a port of its own."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture(scope="module")
def redis(django_db_setup) -> Iterator[OwnRedis]:  # type: ignore[no-untyped-def]
    own = OwnRedis()
    own.start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture(scope="module")
def _server_on_own_redis(redis: OwnRedis) -> Iterator[LiveServer]:
    env = {"REDIS_URL": redis.url, "ANSWERS_EXTRACTIVE_DELAY": "0.1"}
    with run_live_server(connections["default"].settings_dict, env=env) as server:
        yield server


@pytest.fixture
def server(_server_on_own_redis: LiveServer, redis: OwnRedis, corpus) -> Iterator[LiveServer]:  # type: ignore[no-untyped-def]
    if redis.process is None:
        redis.start()
    yield _server_on_own_redis
    if redis.process is None:
        redis.start()  # the next test starts with Redis up
    print(f"--- {_server_on_own_redis.url} ---\n{_server_on_own_redis.log()}")


def _generated_elsewhere(user: Any) -> pipeline.AnswerRun:
    """An answer stored as being written by another process (none here generates it):
    the server follows and stops it through Redis."""
    return started_run(user=user, question=QUESTION)


def test_a_follower_whose_redis_goes_away_gets_an_error_event_and_the_stream_ends(
    server, redis, asker
) -> None:  # type: ignore[no-untyped-def]
    answer = _generated_elsewhere(asker).answer
    auth = bearer_headers(asker)
    with (
        httpx.Client(base_url=server.url, timeout=20.0) as client,
        client.stream(
            "GET", f"/api/answers/{answer.pk}/events", headers={**SSE, **auth}
        ) as response,
    ):
        assert response.status_code == 200  # subscribed (refused before, otherwise)
        redis.stop()
        events = sse_events(response.iter_lines())  # ends: no read timeout
    assert [kind for kind, _ in events] == ["error"]
    assert events[0][1]["code"] == "unavailable"
    assert events[0][1]["answer_id"] == answer.pk


def test_while_redis_is_away_following_and_stopping_are_refused_as_json(
    server, redis, asker
) -> None:  # type: ignore[no-untyped-def]
    answer = _generated_elsewhere(asker).answer
    auth = bearer_headers(asker)
    redis.stop()
    with httpx.Client(base_url=server.url, timeout=20.0) as client:
        followed = client.get(f"/api/answers/{answer.pk}/events", headers={**SSE, **auth})
        assert followed.headers["content-type"].startswith("application/json")
        assert_json_error(followed, 503, "unavailable")
        stopped = client.post(f"/api/answers/{answer.pk}/stop", headers=auth)
        assert_json_error(stopped, 503, "unavailable")
        asked = client.post("/api/answers", json={"question": QUESTION}, headers={**SSE, **auth})
        assert_json_error(asked, 503, "unavailable")
        # Back: the same answer is followed and stopped again.
        redis.start()
        stopped = client.post(f"/api/answers/{answer.pk}/stop", headers=auth)
        assert stopped.status_code == 202, stopped.text


async def test_a_socket_following_an_answer_when_redis_goes_away_is_told_so(
    server, redis, asker
) -> None:  # type: ignore[no-untyped-def]
    run = await sync_to_async(_generated_elsewhere)(asker)
    answer = run.answer
    cookie = await sync_to_async(session_cookie)(asker)
    socket_ = await live_socket(server, cookie)
    try:
        redis.stop()
        await socket_.send(json.dumps({"type": "resume", "answer_id": answer.pk, "after": 0}))
        messages = await live_receive_until_final(socket_)
        assert [(m["type"], m.get("code")) for m in messages] == [("error", "unavailable")]
        # The socket stays usable: once Redis is back, the same answer is followed to
        # its end (here: its process gives up on it).
        redis.start()
        await socket_.send(json.dumps({"type": "resume", "answer_id": answer.pk, "after": 0}))
        await run.fail("ended for the test")
        messages = await live_receive_until_final(socket_)
        assert messages[-1]["answer_id"] == answer.pk
        assert messages[-1].get("code") != "unavailable"
    finally:
        await socket_.close()


def test_an_answer_whose_redis_goes_away_is_stored_as_interrupted_and_its_asker_told(
    server, redis, asker
) -> None:  # type: ignore[no-untyped-def]
    auth = bearer_headers(asker)
    logged_from = server.log_size()
    with (
        httpx.Client(base_url=server.url, timeout=20.0) as client,
        client.stream(
            "POST", "/api/answers", json={"question": QUESTION}, headers={**SSE, **auth}
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("event: token"):
                break  # the answer is being written
        redis.stop()
        rest = [line for line in lines if line.startswith("event: ")]
    # The asker's stream ends with a last word, and what was written is kept.
    assert rest[-1] == "event: done"
    answer = Answer.objects.get()
    assert answer.status == Answer.Status.INTERRUPTED
    # One clear error in the server's log, not a task whose failure nobody read (the
    # generation's tasks are done, and so logged, before its asker gets the last word).
    assert "Task exception was never retrieved" not in server.log_since(logged_from)
