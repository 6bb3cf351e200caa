"""A live server for end-to-end tests: the real ASGI app under daphne, in its own process.

The server is a plain ``daphne`` subprocess (not a fork of the test process), run with
``tests.settings`` against the test database (``DATABASE_URL``: the SQLite file, or the
PostgreSQL test database), so it sees what transactional tests commit. It uses the default
offline ``extractive`` provider, slowed down a little (``ANSWERS_EXTRACTIVE_DELAY``) so
that streaming is observable.

One server serves the whole session; ``tests/conftest.py`` exposes it as the
``daphne_live_server`` fixture, which also loads the corpus (``transactional_db``) for each test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
EXTRACTIVE_DELAY = "0.02"
STARTUP_TIMEOUT = 30.0
_LISTENING = re.compile(r"Listening on TCP address 127\.0\.0\.1:(\d+)")
# Variables of the test process that must not leak into the server's settings.
_SERVER_ENV_DROP = (
    "ANSWERS_PROVIDER",
    "ANSWERS_MODEL",
    "ANSWERS_MAX_CONCURRENT_STREAMS",
    "ANSWERS_QUESTIONS_PER_MINUTE",
    "DJANGO_DEBUG",
    "DATABASE_CONN_MAX_AGE",
    "DATABASE_POOL_SIZE",
    "DJANGO_ALLOWED_HOSTS",
)


@dataclass
class LiveServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def log(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, limit: int = 20_000) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read(limit).decode(errors="replace")
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"The live server exited with code {self.process.returncode}:\n{self.log()}"
            )


def database_url(settings_dict: dict[str, Any]) -> str:
    """A ``DATABASE_URL`` for the database ``settings_dict`` describes (the test database),
    for a child process: a live server, or the concurrent writers."""
    name = str(settings_dict["NAME"])
    if not settings_dict["ENGINE"].endswith(("sqlite3", "postgresql")):
        raise RuntimeError(f"No DATABASE_URL for {settings_dict['ENGINE']}.")
    if settings_dict["ENGINE"].endswith("sqlite3"):
        if not name or name == ":memory:" or "mode=memory" in name:
            raise RuntimeError("The live server needs a file database, not an in-memory one.")
        return f"sqlite:///{os.path.abspath(name)}"
    user = quote(str(settings_dict.get("USER") or ""))
    password = quote(str(settings_dict.get("PASSWORD") or ""))
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host, port = settings_dict.get("HOST") or "", settings_dict.get("PORT") or ""
    return f"postgres://{credentials}{host}{':' + str(port) if port else ''}/{quote(name)}"


def _server_env(database: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SERVER_ENV_DROP}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": database_url(database),
            # The same test run as far as tests.settings is concerned (Redis prefixes).
            "ANSWERS_TEST_DB": str(database["NAME"]),
            "ANSWERS_EXTRACTIVE_DELAY": EXTRACTIVE_DELAY,
            # Stopping a server at the end of a test need not wait for its answers long.
            "ANSWERS_SHUTDOWN_GRACE": "1",
            # As deployed: on PostgreSQL, retrieval on threads of its own.
            "ANSWERS_RETRIEVAL_THREADS": "4",
            # A server opens its whole pool at start (answers.pool): 1 + the retrieval
            # threads, so that every test worker's servers together fit PostgreSQL's
            # max_connections (a thread over it waits for a connection, never fails).
            "DATABASE_POOL_SIZE": "5",
            # DEBUG is off in tests.settings, which would make cookies Secure (no login
            # over plain http).
            "DJANGO_SECURE_COOKIES": "0",
            "PYTHONUNBUFFERED": "1",
            # run_live_server finds the port in daphne's INFO "Listening on" line.
            "DJANGO_LOG_LEVEL": "INFO",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
            ),
        }
    )
    return env


def _wait_until_serving(server: LiveServer, deadline: float) -> None:
    """Wait for daphne to log its port, then for Django to answer a request."""
    while server.port == 0:
        server.check_alive()
        match = _LISTENING.search(server.log(tail=1_000_000))
        if match:
            server.port = int(match.group(1))
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"The live server did not start listening:\n{server.log()}")
        time.sleep(0.05)
    while True:
        server.check_alive()
        try:
            response = httpx.get(f"{server.url}/accounts/login/", timeout=2.0)
        except httpx.HTTPError:
            response = None
        if response is not None and response.status_code == 200:
            return
        if time.monotonic() > deadline:
            status = response.status_code if response is not None else "no response"
            raise RuntimeError(f"The live server is not serving ({status}):\n{server.log()}")
        time.sleep(0.05)


@contextmanager
def run_live_server(
    database: dict[str, Any], *, env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    """Run daphne on a free port against ``database`` (a connection's settings_dict: an
    SQLite file or PostgreSQL) until exit. With REDIS_URL set, it shares that Redis.
    ``env`` adds to or overrides the server's environment."""
    env = {**_server_env(database), **(env or {})}
    daphne = Path(sys.executable).with_name("daphne")
    command = [str(daphne)] if daphne.exists() else [sys.executable, "-m", "daphne"]
    command += ["-b", "127.0.0.1", "-p", "0", "config.asgi:application"]
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below)
        prefix="live-server-", suffix=".log", delete=False
    )
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()
    server = LiveServer(process=process, port=0, log_path=Path(log_file.name))
    try:
        _wait_until_serving(server, time.monotonic() + STARTUP_TIMEOUT)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        Path(log_file.name).unlink(missing_ok=True)


def ensure_chromium() -> str:
    """The path of Debian's chromium, installing it with apt-get if it is missing."""
    if CHROMIUM.exists():
        return str(CHROMIUM)
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise RuntimeError(f"{CHROMIUM} is missing and apt-get is not available to install it.")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = ([apt_get, "update", "-q"], [apt_get, "install", "-y", "-q", "chromium"])
    for step in steps:
        result = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"{CHROMIUM} is missing and `{' '.join(step)}` failed "
                f"(exit {result.returncode}); install chromium to run the browser tests:\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )
    if not CHROMIUM.exists():
        raise RuntimeError(f"apt-get installed chromium, but {CHROMIUM} does not exist.")
    return str(CHROMIUM)
