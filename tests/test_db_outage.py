"""The database going away and coming back, under a real daphne server (tests/live.py) on
PostgreSQL: the server logs in as a role of its own, which is stopped from logging in and
whose backends are ended, then let in again. Nothing else loses the database, and the
server itself is never stopped.

What a client relies on: whatever it asks while the database is away is refused quickly
with the same JSON error as every other refusal (503 ``unavailable``, with Retry-After),
and once the database is back the same requests work again.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.db import connection, connections

from answers.models import Answer
from tests.helpers import assert_json_error, bearer_headers, sse_events, started_run
from tests.live import LiveServer, run_live_server
from tests.sockets import live_receive_until_final, live_socket, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL"),
]

QUESTION = "What is a lambda expression?"
SSE = {"Accept": "text/event-stream"}


def _control() -> Any:
    """A connection to the maintenance database, where roles are altered (nothing is read or
    written there)."""
    import psycopg

    settings = connection.settings_dict
    return psycopg.connect(
        dbname="postgres",
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        autocommit=True,
    )


class Outage:
    """Makes the database refuse this module's server, and only it: the server logs in as a
    role of its own, which the outage stops from logging in and whose backends it ends.
    Every other connection to the test database (this process's, the session's other live
    servers) stays: an outage of the whole database left their pools backing off their
    reconnects, and the tests after this module failed on them."""

    def __init__(self, control: Any, role: str) -> None:
        self.control = control
        self.role = role

    def begin(self) -> None:
        self.control.execute(f'ALTER ROLE "{self.role}" NOLOGIN')
        self.control.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            [self.role],
        )
        # A backend told to end may still answer a query for a moment: the outage has begun
        # when none is left.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = self.control.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [self.role]
            ).fetchone()
            if not left or not left[0]:
                return
            time.sleep(0.05)

    def end(self) -> None:
        self.control.execute(f'ALTER ROLE "{self.role}" LOGIN')


@pytest.fixture(scope="module")
def _outage_role(django_db_setup) -> Iterator[tuple[Any, str]]:  # type: ignore[no-untyped-def]
    with _role("outage") as made:
        yield made


@contextmanager
def _role(prefix: str) -> Iterator[tuple[Any, str]]:
    # One role per test database (each test worker has its own); a superuser, so that it
    # needs no grants on the tables the server reads and writes.
    role = f"{prefix}_{connection.settings_dict['NAME']}"[:63].replace('"', "")
    control = _control()
    control.execute(f'DROP ROLE IF EXISTS "{role}"')
    control.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    try:
        yield control, role
    finally:
        control.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role]
        )
        control.execute(f'DROP ROLE IF EXISTS "{role}"')
        control.close()


@pytest.fixture(scope="module")
def _server_on_pg(_outage_role: tuple[Any, str]) -> Iterator[LiveServer]:
    env = {"ANSWERS_EXTRACTIVE_DELAY": "0.1"}
    database = {**connections["default"].settings_dict, "USER": _outage_role[1]}
    with run_live_server(database, env=env) as server:
        yield server


@pytest.fixture
def outage(  # type: ignore[no-untyped-def]
    _server_on_pg: LiveServer, _outage_role: tuple[Any, str], corpus
) -> Iterator[Outage]:
    own = Outage(*_outage_role)
    try:
        yield own
    finally:
        own.end()
        print(f"--- {_server_on_pg.url} ---\n{_server_on_pg.log()}")


@pytest.fixture
def server(_server_on_pg: LiveServer, outage: Outage) -> LiveServer:
    return _server_on_pg


def test_while_the_database_is_away_the_api_refuses_with_503_and_retry_after(
    server, outage, asker
) -> None:  # type: ignore[no-untyped-def]
    answer = started_run(user=asker, question=QUESTION).answer
    auth = bearer_headers(asker)
    with httpx.Client(base_url=server.url, timeout=60.0) as client:
        assert client.get(f"/api/answers/{answer.pk}", headers=auth).status_code == 200
        outage.begin()
        for method, path, headers in [
            ("GET", f"/api/answers/{answer.pk}/events", {**SSE, **auth}),
            ("POST", f"/api/answers/{answer.pk}/stop", auth),
            ("GET", f"/api/answers/{answer.pk}", auth),
            ("POST", "/api/answers", {**SSE, **auth}),
        ]:
            body = {"question": QUESTION} if path == "/api/answers" else None
            response = client.request(method, path, headers=headers, json=body)
            assert_json_error(response, 503, "unavailable")
            assert int(response.headers["Retry-After"]) > 0
        # Back: a client that asks again after Retry-After reads the same answer (the pool
        # reconnects with its own back-off, so not necessarily on the first try).
        outage.end()
        assert _read_once_back(client, f"/api/answers/{answer.pk}", auth).status_code == 200


def test_while_the_database_is_away_the_process_is_alive_but_not_ready(server, outage) -> None:  # type: ignore[no-untyped-def]
    """A load balancer stops sending questions to a process whose database is away, and
    sends them again once it is back; the orchestrator does not restart it meanwhile."""
    with httpx.Client(base_url=server.url, timeout=60.0) as client:
        assert client.get("/health/ready").json() == {"status": "ok"}
        outage.begin()
        ready = client.get("/health/ready")
        assert ready.status_code == 503 and int(ready.headers["Retry-After"]) > 0
        assert ready.json() == {"status": "unavailable", "problems": ["database"]}
        assert client.get("/health/live").status_code == 200
        outage.end()
        assert _read_once_back(client, "/health/ready", {}).status_code == 200


def _read_once_back(client: httpx.Client, path: str, headers: dict[str, str]) -> httpx.Response:
    deadline = time.monotonic() + 120
    while True:
        response = client.get(path, headers=headers)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(int(response.headers["Retry-After"]))


def test_an_answer_whose_final_write_fails_is_stored_once_the_database_is_back(
    server, outage, asker
) -> None:  # type: ignore[no-untyped-def]
    auth = bearer_headers(asker)
    with (
        httpx.Client(base_url=server.url, timeout=60.0) as client,
        client.stream(
            "POST", "/api/answers", json={"question": QUESTION}, headers={**SSE, **auth}
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        events = sse_events(lines, until="token")
        outage.begin()  # the answer is being written: its end cannot be stored
        events += sse_events(lines)
    kind, last = events[-1]
    # The asker is told what happened to the answer, not that generating it failed.
    assert (kind, last["code"]) == ("error", "unavailable")
    seen = "".join(data["text"] for kind, data in events if kind == "token")
    answer = Answer.objects.get()
    assert answer.status == Answer.Status.STREAMING  # nothing could store it yet
    outage.end()
    deadline = time.monotonic() + 120
    while answer.status == Answer.Status.STREAMING and time.monotonic() < deadline:
        time.sleep(0.5)
        answer.refresh_from_db()
    # Stored as it was written (no longer holding one of its asker's concurrent answers),
    # with everything the asker saw.
    assert answer.status == Answer.Status.COMPLETE
    assert seen and _words(seen) == _words(answer.final_text)


def _words(text: str) -> list[str]:
    return re.sub(r"\[\d+\]", " ", text).split()


def test_a_socket_opened_while_the_database_is_away_is_told_so(server, outage, asker) -> None:  # type: ignore[no-untyped-def]
    # A sync test: the outage spares the test's own connection, this thread's.
    cookie = session_cookie(asker)
    outage.begin()
    # Accepted, told why it gets nothing, and closed with 4503 (unavailable): not a
    # failed handshake the page cannot tell from a server that is gone.
    messages, close_code = asyncio.run(_open_and_listen(server, cookie))
    assert [(m["type"], m["code"]) for m in messages] == [("error", "unavailable")]
    assert close_code == 4503
    # Back: a new socket is accepted and answers again.
    outage.end()
    deadline = time.monotonic() + 120
    while True:
        messages = asyncio.run(_ask_on_new_socket(server, cookie))
        if messages[-1].get("code") != "unavailable" or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert messages[-1]["type"] == "done"


async def _open_and_listen(server: LiveServer, cookie: str) -> tuple[list[dict], int | None]:
    from websockets.exceptions import ConnectionClosed

    socket_ = await live_socket(server, cookie)
    try:
        messages = await live_receive_until_final(socket_, timeout=30)
        try:
            await asyncio.wait_for(socket_.recv(), 30)
        except ConnectionClosed as closed:
            return messages, closed.rcvd.code if closed.rcvd is not None else None
        return messages, None
    finally:
        await socket_.close()


async def _ask_on_new_socket(server: LiveServer, cookie: str) -> list[dict]:
    from websockets.exceptions import ConnectionClosed

    socket_ = await live_socket(server, cookie)
    try:
        await socket_.send(json.dumps({"type": "ask", "question": QUESTION}))
        return await live_receive_until_final(socket_, timeout=30)
    except ConnectionClosed as closed:
        # Still away: the server said so and closed (4503) before the ask was read.
        if closed.rcvd is not None and closed.rcvd.code == 4503:
            return [{"type": "error", "code": "unavailable"}]
        raise
    finally:
        await socket_.close()


def test_a_server_told_to_stop_while_the_database_is_away_stores_its_answers_once_back(
    django_db_setup, corpus, asker
) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM while an answer's outcome waits for the database: the drain keeps trying for
    what is left of SHUTDOWN_GRACE instead of exiting with it unstored (it would then stay
    ``streaming`` until it counts as abandoned, and its text would be lost)."""
    # A role of its own: the module's server (the outage role's) is not disturbed.
    with _role("stopping") as (control, role):
        seen, log = _stopped_during_an_outage(Outage(control, role), asker)
    answer = Answer.objects.get()
    assert answer.status == Answer.Status.COMPLETE, log
    assert seen and _words(seen) == _words(answer.final_text)


def _stopped_during_an_outage(outage: Outage, asker: Any) -> tuple[str, str]:
    """Ask a server of ``outage``'s role, begin the outage while the answer is written,
    SIGTERM the server, end the outage once it waits for the store; what the asker saw
    and the server's log."""
    import signal
    import subprocess

    env = {"ANSWERS_EXTRACTIVE_DELAY": "0.1", "ANSWERS_SHUTDOWN_GRACE": "90"}
    database = {**connections["default"].settings_dict, "USER": outage.role}
    auth = bearer_headers(asker)
    try:
        with run_live_server(database, env=env) as server:
            with (
                httpx.Client(base_url=server.url, timeout=60.0) as client,
                client.stream(
                    "POST", "/api/answers", json={"question": QUESTION}, headers={**SSE, **auth}
                ) as response,
            ):
                lines = response.iter_lines()
                events = sse_events(lines, until="token")
                outage.begin()
                events += sse_events(lines)
            assert (events[-1][0], events[-1][1]["code"]) == ("error", "unavailable")
            seen = "".join(data["text"] for kind, data in events if kind == "token")
            server.process.send_signal(signal.SIGTERM)
            waiting = "waiting for 1 answer(s) to be stored"
            deadline = time.monotonic() + 30
            while waiting not in server.log() and server.process.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert waiting in server.log(), server.log()
            outage.end()
            try:
                server.process.wait(150)
            except subprocess.TimeoutExpired:
                pytest.fail(f"daphne did not stop after SIGTERM:\n{server.log()}")
            return seen, server.log()
    finally:
        outage.end()


def test_the_page_following_an_answer_waits_out_the_database_and_goes_on(
    browser, server, outage, asker
) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    from tests.browser import RECORD_SOCKETS, log_in, new_page, start_asking, unexpected_errors

    page = new_page(browser, server.url, init_script=RECORD_SOCKETS)
    try:
        log_in(page, "asker", "pw-asker")
        turn = start_asking(page, QUESTION)
        answer = turn.locator("[data-answer]")
        shown = answer.text_content() or ""
        outage.begin()
        page.evaluate("window.__sockets.at(-1).close()")  # dropped: it reconnects to 4503
        # Refused (the next socket closed) and said in words, while the answer is still
        # followed: not ended as failed, nothing to ask again.
        page.wait_for_function(
            """() => window.__sockets.length >= 2 && window.__sockets[1].readyState === 3
                && /unavailable.*the answer goes on/.test(
                    document.querySelector("[data-ask-status]").textContent)"""
        )
        expect(answer).to_have_attribute("data-answer-state", "streaming")
        expect(turn.locator("[data-retry]")).to_be_hidden()
        outage.end()
        # The rest of the same answer: done, or (when it ended during the outage) all of
        # its text with the notice that it is saved once the database is back.
        expect(answer).to_have_attribute(
            "data-answer-state", re.compile("done|error"), timeout=60_000
        )
        text = answer.text_content() or ""
        assert text.startswith(shown[:40]) and len(text) > len(shown)
        if answer.get_attribute("data-answer-state") == "error":
            expect(turn.locator(".error")).to_contain_text("It will be saved as you saw it")
        else:
            expect(turn.locator(".error")).to_have_count(0)
        expect(turn.locator("[data-retry]")).to_be_hidden()  # asking again would be a duplicate
        expect(page.locator("[data-ask-status]")).to_have_text("")
        print("ended as", answer.get_attribute("data-answer-state"))
        assert Answer.objects.count() == 1
        # The browser's own report of a handshake the server dropped meanwhile (the page
        # tried again) is not the page's error.
        assert [
            m for m in unexpected_errors(page) if "Error during WebSocket handshake" not in m
        ] == []
    finally:
        page.context.close()
