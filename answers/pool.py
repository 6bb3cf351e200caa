"""The served process's database connections, readied when the server starts: the
PostgreSQL pool opened full, or on SQLite one connection held open (ADR 0035) and the
shared database thread's own connection kept between calls (ADR 0038)."""

from __future__ import annotations

import sqlite3
import sys
import threading
from typing import Any

from asgiref.sync import SyncToAsync
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabase

# SQLite: a connection per database file, held for the life of the process (see below).
_sqlite_holders: dict[str, sqlite3.Connection] = {}
_sqlite_holders_lock = threading.Lock()
# Set on the one thread whose SQLite connections are kept between calls (below).
_shared_thread = threading.local()
_kept_aliases: set[str] = set()


def database_pool_open(*, alias: str = "default") -> bool:
    """Open ``alias``'s connection pool now, at its full size (``DATABASE_POOL_SIZE``), in
    the background. Otherwise Django opens the pool on the first query and psycopg_pool
    grows it one connection at a time while the first burst of questions waits (each a
    PostgreSQL backend to fork and set up). The connections count against
    ``max_connections`` either way (docs/deployment.md#sizing); this only opens them before
    they are needed. False (nothing done) without a pool."""
    pool = getattr(connections[alias], "pool", None)
    if pool is None:
        return False
    pool.open(wait=False)
    # After open(): on a pool not yet open, resize() and open() would each add connections.
    pool.resize(min_size=pool.max_size, max_size=pool.max_size)
    return True


def database_sqlite_hold(*, alias: str = "default") -> bool:
    """On SQLite, open one connection to ``alias``'s database file and hold it for the
    life of the process. SQLite has no pool: Django opens a connection for each piece of
    database work an answer does and closes it after (``CONN_MAX_AGE`` 0, as Django wants
    under ASGI), and the last connection to a WAL database that closes checkpoints the WAL
    into the database, syncs both and deletes it, which the next one creates again: four
    syncs of the disk for every close, several per answer, all on the one thread that
    database work shares. While this connection is open no other is the last, so a close
    only closes; the WAL is checkpointed by SQLite's own threshold (1,000 pages) instead.
    It reads nothing after opening and holds no transaction. False (nothing done) on
    another database or an in-memory one."""
    wrapper = connections[alias]
    if not isinstance(wrapper, SQLiteDatabase) or wrapper.is_in_memory_db():
        return False
    name = str(wrapper.settings_dict["NAME"])
    options = wrapper.settings_dict.get("OPTIONS", {})
    with _sqlite_holders_lock:
        if name in _sqlite_holders:
            return True
        holder = sqlite3.connect(
            name, timeout=float(options.get("timeout", 5)), check_same_thread=False, uri=True
        )
        # The project's own set-up (WAL, the sync level), as every Django connection runs it.
        if options.get("init_command"):
            holder.executescript(options["init_command"])
        # Reading opens the file and the WAL index: from now on this connection counts.
        holder.execute("SELECT count(*) FROM sqlite_master").fetchall()
        _sqlite_holders[name] = holder
    return True


def database_sqlite_keep_shared(*, alias: str = "default") -> bool:
    """On SQLite, keep the connection of the thread that all WebSocket answers' database
    work shares (asgiref's one thread-sensitive thread, which Channels'
    ``database_sync_to_async`` and the pipeline's steps run on) open between calls, as
    ``CONN_MAX_AGE`` would, for that thread only. Django closes a connection after each
    call there (``CONN_MAX_AGE`` 0), and opening one costs a file open, Django's
    functions registered and the schema parsed again: five or so per answer, 14 % of a
    daphne's CPU at 500 answers at once. Other threads (an HTTP request's, one per
    request under ASGI) still close theirs, so none is left behind by a thread that ends.
    A kept connection holds no transaction between calls (autocommit), and one left
    unusable or mid-transaction is still closed by ``close_old_connections``. False
    (nothing done) on another database, an in-memory one, or an asgiref without that
    thread."""
    wrapper = connections[alias]
    # The executor is asgiref's class attribute, not documented API: without it (another
    # asgiref), nothing is kept and Django's behaviour stays.
    executor = getattr(SyncToAsync, "single_thread_executor", None)
    if not isinstance(wrapper, SQLiteDatabase) or wrapper.is_in_memory_db() or executor is None:
        return False
    _kept_aliases.add(alias)
    connection_created.connect(_keep_on_shared_thread, dispatch_uid="answers.pool.keep")
    # Queued first on that thread's executor, so it runs before any later database work.
    executor.submit(_mark_shared_thread)
    return True


def _mark_shared_thread() -> None:
    _shared_thread.keep = True


def _keep_on_shared_thread(*, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    # Django sets close_at from CONN_MAX_AGE just before this signal; None keeps it open.
    if getattr(_shared_thread, "keep", False) and connection.alias in _kept_aliases:
        connection.close_at = None


def database_open(*, alias: str = "default") -> None:
    """Ready ``alias`` for serving: its pool opened full (PostgreSQL), or a connection held
    open and the shared thread's connection kept (SQLite)."""
    if not database_pool_open(alias=alias) and database_sqlite_hold(alias=alias):
        database_sqlite_keep_shared(alias=alias)


def database_pool_open_on_startup() -> bool:
    """Under daphne, ``database_open`` once the server runs: call it from the ASGI module.
    Not at import: a test or a command importing the module must not open a pool (the
    test database does not exist yet then). False (nothing done) under a server that is
    not Twisted's; there, call ``database_open`` from its startup hook (an ASGI lifespan
    ``startup``)."""
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import reactor as installed

    reactor: Any = installed  # an IReactorCore (zope interfaces type badly)
    reactor.callWhenRunning(database_open)
    return True
