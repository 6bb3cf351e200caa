"""The served process's database connections, readied when the server starts: the
PostgreSQL pool opened full, or on SQLite one connection held open (ADR 0035)."""

from __future__ import annotations

import sqlite3
import sys
import threading
from typing import Any

from django.db import connections
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabase

# SQLite: a connection per database file, held for the life of the process (see below).
_sqlite_holders: dict[str, sqlite3.Connection] = {}
_sqlite_holders_lock = threading.Lock()


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


def database_open(*, alias: str = "default") -> None:
    """Ready ``alias`` for serving: its pool opened full (PostgreSQL), or a connection held
    open (SQLite)."""
    database_pool_open(alias=alias) or database_sqlite_hold(alias=alias)


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
