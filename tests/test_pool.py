"""``answers.pool``: on SQLite, the shared database thread keeps its connection between
calls, and no other thread does (ADR 0038)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from asgiref.sync import SyncToAsync
from django.db import close_old_connections, connection, connections
from django.db.backends.signals import connection_created

from answers import pool

pytestmark = pytest.mark.django_db(transaction=True)
T = TypeVar("T")


@pytest.fixture
def sqlite_only() -> None:
    if connections["default"].vendor != "sqlite":
        pytest.skip("SQLite's connections (PostgreSQL has its pool)")


@pytest.fixture
def kept(sqlite_only: None) -> Iterator[None]:
    """``database_sqlite_keep_shared`` in this process, undone afterwards: the shared
    thread's connection closed and the thread no longer marked."""
    assert pool.database_sqlite_keep_shared()
    yield
    connection_created.disconnect(dispatch_uid="answers.pool.keep")
    pool._kept_aliases.clear()

    def forget() -> None:
        connections.close_all()
        pool._shared_thread.keep = False

    SyncToAsync.single_thread_executor.submit(forget).result()


@pytest.fixture
def opened() -> Iterator[list[object]]:
    """A list that collects each connection Django opens while it is in use."""
    opened: list[object] = []

    def count(*, connection: object, **kwargs: object) -> None:
        opened.append(connection)

    connection_created.connect(count, weak=False, dispatch_uid="tests.pool.count")
    try:
        yield opened
    finally:
        connection_created.disconnect(dispatch_uid="tests.pool.count")


def _query() -> object:
    """A query on the calling thread's connection; the sqlite3 connection it ran on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return connection.connection


def _as_channels_does(work: Callable[[], T]) -> Callable[[], T]:
    """``work`` between two ``close_old_connections``, as Channels'
    ``database_sync_to_async`` runs every call."""

    def call() -> T:
        close_old_connections()
        try:
            return work()
        finally:
            close_old_connections()

    return call


def _on_shared_thread(work: Callable[[], T]) -> T:
    """``work`` on asgiref's one thread-sensitive thread, where every socket's database
    calls run in daphne."""
    return SyncToAsync.single_thread_executor.submit(_as_channels_does(work)).result()


def _on_a_thread_of_its_own(work: Callable[[], T]) -> T:
    """``work`` on a new thread, as an HTTP request's sync code runs under ASGI."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        return executor.submit(_as_channels_does(work)).result()


def test_the_shared_thread_opens_one_connection_for_many_calls(kept, opened):
    """Channels closes a connection around every call (``close_old_connections``): on the
    thread all socket answers share, that was a file open, Django's functions and the
    schema again, several times an answer. Kept, every call uses the same one."""
    first = _on_shared_thread(_query)
    for _ in range(4):
        assert _on_shared_thread(_query) is first
    assert len(opened) == 1


def test_other_threads_still_close_their_connections(kept, opened):
    """An HTTP request under ASGI runs its sync code on a thread of its own: its
    connection is closed after each call as before, so a request's thread that ends
    leaves no connection behind."""

    def closed_after_query() -> bool:
        _query()
        close_old_connections()
        return connection.connection is None

    for _ in range(3):
        assert _on_a_thread_of_its_own(closed_after_query)
    assert len(opened) == 3


def test_a_kept_connection_left_in_a_transaction_is_closed(kept, opened):
    """A kept connection never carries a broken state into the next call: one left
    outside autocommit (an error escaped a transaction) is closed and a new one opened."""

    def leave_in_transaction() -> None:
        connection.set_autocommit(False)

    _on_shared_thread(_query)
    _on_shared_thread(leave_in_transaction)
    _on_shared_thread(_query)
    assert len(opened) == 2


def test_without_the_server_start_nothing_is_kept(sqlite_only, opened):
    """Only a served process keeps the connection (``database_open`` when daphne runs):
    tests and commands keep Django's behaviour."""
    _on_shared_thread(_query)
    _on_shared_thread(_query)
    assert len(opened) == 2


def test_an_asgiref_without_the_shared_executor_keeps_nothing(sqlite_only, monkeypatch):
    """The executor is asgiref's class attribute, not documented API: if a release drops
    it, the server starts and behaves as Django does."""
    monkeypatch.delattr(SyncToAsync, "single_thread_executor")
    assert pool.database_sqlite_keep_shared() is False
    assert not pool._kept_aliases


def _database_handles(pid: int, database: Path) -> int:
    """How many file descriptors of process ``pid`` are open on ``database``."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if Path(os.readlink(fd)) == database:
                count += 1
        except OSError:  # closed meanwhile
            continue
    return count


async def _database_handles_down_to(pid: int, database: Path, at_most: int) -> int:
    """``_database_handles`` once it is ``at_most`` or fewer, or as it is after a generous
    deadline: a request closes its connection just after its response is sent, which on a
    loaded machine may be well after its client has read it."""
    deadline = time.monotonic() + 10
    while (count := _database_handles(pid, database)) > at_most:
        if time.monotonic() > deadline:
            return count
        await asyncio.sleep(0.05)
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
async def test_a_served_process_holds_a_fixed_number_of_connections(
    sqlite_only, daphne_live_server, asker
):
    """Under daphne, socket answers and JSON asks (each request on a thread of its own)
    leave the same connections open however many questions come (the held one, the
    shared thread's kept one): nothing is kept per request or per question."""
    from asgiref.sync import sync_to_async

    from tests.helpers import bearer_headers
    from tests.sockets import live_receive_until_final, live_socket, session_cookie

    server = daphne_live_server
    database = Path(connections["default"].settings_dict["NAME"]).resolve()
    cookie = await sync_to_async(session_cookie)(asker)
    headers = await sync_to_async(bearer_headers)(asker, name="pool")
    # The server is the session's: earlier tests have asked it already, or not.
    before = _database_handles(server.process.pid, database)
    counts: list[int] = []
    for i in range(4):
        socket = await live_socket(server, cookie)
        try:
            await socket.send(json.dumps({"type": "ask", "question": f"lambda {i}"}))
            messages = await live_receive_until_final(socket)
        finally:
            await socket.close()
        assert messages[-1]["type"] == "done", messages[-1]
        import httpx

        async with httpx.AsyncClient() as client:
            response = await client.post(
                f"{server.url}/api/answers", json={"question": f"lambda {i}"},
                headers=headers, timeout=60,
            )  # fmt: skip
        assert response.status_code == 200, response.text
        # What the requests opened is closed once they end. The first question may open
        # the shared thread's kept connection (a new server), which then stays open.
        at_most = counts[0] if counts else before
        counts.append(await _database_handles_down_to(server.process.pid, database, at_most))
    # However many questions: nothing kept per request or per question.
    assert counts[0] == counts[1] == counts[2] == counts[3], counts
