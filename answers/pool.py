"""The served process's database pool, opened full when the server starts."""

from __future__ import annotations

import sys
from typing import Any

from django.db import connections


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


def database_pool_open_on_startup() -> bool:
    """Under daphne, ``database_pool_open`` once the server runs: call it from the ASGI
    module. Not at import: a test or a command importing the module must not open a pool
    (the test database does not exist yet then). False (nothing done) under a server that
    is not Twisted's; there, call ``database_pool_open`` from its startup hook (an ASGI
    lifespan ``startup``)."""
    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import reactor as installed

    reactor: Any = installed  # an IReactorCore (zope interfaces type badly)
    reactor.callWhenRunning(database_pool_open)
    return True
