"""The optional services some sections measure: the local Redis and PostgreSQL.

A section whose service is missing raises ``Unavailable``; ``python -m bench`` prints the
reason and skips it (a benchmark never fails for want of a server).

    BENCH_REDIS_URL     default redis://127.0.0.1:6379/0
    BENCH_POSTGRES_URL  default postgres://root@127.0.0.1:5432/postgres (a role that may
                        create databases; the bench creates and drops its own)
"""

from __future__ import annotations

import json
import os
import runpy
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres")
SETTINGS_FILE = Path(__file__).resolve().parent.parent / "config" / "settings.py"


class Unavailable(Exception):
    """A service a section needs is not there (not installed, or not reachable)."""


def unique_prefix() -> str:
    """A key prefix no deployment or other run on the same Redis uses."""
    return f"cited-answers-bench-{os.getpid()}-{secrets.token_hex(4)}"


def require_redis() -> None:
    try:
        import channels_redis  # noqa: F401
        import redis
    except ImportError as exc:
        raise Unavailable(f"{exc.name} is not installed (pip install -e '.[redis]')") from None
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Unavailable(f"Redis at {REDIS_URL} is not reachable: {exc}") from None
    finally:
        client.close()


def layer_and_cache_settings(redis_url: str, prefix: str = "") -> tuple[Any, Any]:
    """CHANNEL_LAYERS and CACHES exactly as config/settings.py builds them for this
    ``REDIS_URL`` ("": the single-process in-memory layer and local-memory cache).

    The settings file is run again with the variables set, so the bench measures the
    deployment's own configuration, whatever it becomes (the shell's REDIS_URL aside)."""
    overrides = {"REDIS_URL": redis_url, "CHANNEL_PREFIX": prefix, "CACHE_PREFIX": prefix}
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        namespace = runpy.run_path(str(SETTINGS_FILE))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return namespace["CHANNEL_LAYERS"], namespace["CACHES"]


def delete_redis_keys(prefix: str) -> int:
    """Delete every key under ``prefix`` (the channel layer's and the cache's)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        return len(keys)
    finally:
        client.close()


def require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("psycopg is not installed (pip install -e '.[postgres]')") from None


def postgres_admin() -> Any:
    """An autocommit connection to the admin database (CREATE/DROP DATABASE need one)."""
    require_psycopg()
    import psycopg

    try:
        return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())  # libpq's message spans lines
        raise Unavailable(f"PostgreSQL at {POSTGRES_URL} is not reachable: {reason}") from None


CHILD_TIMEOUT = 900.0


def child_json(
    module: str, database_url: str, *args: str, timeout: float = CHILD_TIMEOUT
) -> dict[str, Any]:
    """Run ``python -m MODULE ARGS`` on ``database_url`` (a process of its own: one
    database per process, as Django wants) and return the JSON its last line prints."""
    env = {**os.environ, "DATABASE_URL": database_url}
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=SETTINGS_FILE.parent.parent, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"python -m {module} took over {timeout:.0f} s") from None
    if done.returncode:
        raise RuntimeError(f"python -m {module} failed ({done.returncode}), see above")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
