"""6. Streaming: N concurrent WebSocket clients against the app under daphne, and against
a bare Channels consumer sending the same number of frames (``bench.bare_asgi``).

The clients run in their own process (``bench.ws_clients``, autobahn's asyncio client):
all connect first, then all ask at once, and the clock runs from then to the last close.
Each client is a different logged-in user, as the per-user limits allow one stream each.

Then the same with ``bench.providers``' stamped providers (as fast as they can, and 20
tokens/s), against the bare consumer sending as many stamped frames at the same pace:
tokens/s delivered, and the emission-to-arrival gap of each token (p50, p99); each also
with ``STREAM_COALESCE_MS=5`` (tokens arriving within 5 ms go out as one frame).
Issue 15's targets: at least 0.7x the bare consumer's tokens/s at 200 clients and 0.5x at
500 (0.8x at 50).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client

from answers.conf import DEFAULTS

from . import providers
from .db import Databases
from .questions import LATENCY_QUESTIONS
from .report import Row

SECTION = "6. streaming over WebSocket (aggregate)"
# The process id of each running daphne, by its port (section 11 reads their CPU time).
DAPHNE_PIDS: dict[int, int] = {}
REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT = 90.0
# Issue 15: the share of the bare consumer's tokens/s the app must deliver, by clients.
TARGETS = {50: 0.8, 200: 0.7, 500: 0.5}
STAMPED_COUNTS = tuple(TARGETS)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def daphne(
    app: str,
    database: Path,
    log: Path,
    provider: str = "",
    coalesce_ms: int = 0,
    env_extra: dict[str, str] | None = None,
    checkout: Path = REPO,
) -> Iterator[int]:
    """A daphne serving ``app`` from ``checkout``'s code (its working directory: daphne puts
    "." first on ``sys.path``, ahead of ``PYTHONPATH`` and the editable install)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("ANSWERS_PROVIDER", "ANSWERS_MODEL")}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=f"sqlite:///{database}",
        DJANGO_SECURE_COOKIES="0",  # plain http: a Secure cookie would never be sent
        ANSWERS_EXTRACTIVE_DELAY="0",
        DJANGO_LOG_LEVEL="WARNING",
        PYTHONPATH=str(checkout),
    )
    # tests.settings keeps retrieval on the test's own connection (RETRIEVAL_THREADS 0);
    # a served process has the product's default, so the bench measures that.
    env["ANSWERS_RETRIEVAL_THREADS"] = str(DEFAULTS["RETRIEVAL_THREADS"])
    if provider:
        env["ANSWERS_PROVIDER"] = provider
    env["ANSWERS_STREAM_COALESCE_MS"] = str(coalesce_ms)
    env.update(env_extra or {})  # another database, Redis, limits (bench.scale_out)
    command = [str(Path(sys.executable).with_name("daphne")), "-v", "0"]
    command += ["-b", "127.0.0.1", "-p", str(port), app]
    with log.open("ab") as output:
        process = subprocess.Popen(
            command, cwd=checkout, env=env, stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited:\n{log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("daphne did not start listening")
            time.sleep(0.05)
        DAPHNE_PIDS[port] = process.pid
        yield port
    finally:
        DAPHNE_PIDS.pop(port, None)
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _session_cookies(count: int) -> list[str]:
    """A session cookie for each of ``count`` users with the ask permission."""
    permission = Permission.objects.get(codename="ask_question")
    cookies = []
    for index in range(count):
        user, created = User.objects.get_or_create(username=f"bench-ws-{index}")
        if created:
            user.user_permissions.add(permission)
        client = Client()
        client.force_login(user)
        cookies.append(client.cookies["sessionid"].value)
    return cookies


def _measure(url: str, port: int, cookies: list[str], messages: list[str]) -> dict[str, Any]:
    spec = {
        "url": url,
        "origin": f"http://127.0.0.1:{port}",
        "cookies": cookies,
        "messages": messages,
        "timeout": RUN_TIMEOUT,
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.ws_clients"],
        cwd=REPO, input=json.dumps(spec), capture_output=True, text=True, check=False,
        timeout=RUN_TIMEOUT + 30,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"the WebSocket clients failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _ask(index: int) -> str:
    question = LATENCY_QUESTIONS[index % len(LATENCY_QUESTIONS)]
    return json.dumps({"type": "ask", "question": question})


def _percentile(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def _stamped(result: dict[str, Any]) -> tuple[float, list[float]]:
    """Stamped tokens delivered per second, and every gap (ms)."""
    gaps = [gap for stream in result["streams"] for gap in stream["gaps"]]
    return len(gaps) / result["seconds"], gaps


def _stamped_rows(log: Path, dbs: Databases, cookies: list[str], full: bool) -> list[Row]:
    rows = []
    cases = [
        ("fast", "bench.providers.FastStampedProvider", 0.0, 0),
        ("fast, coalesced 5 ms", "bench.providers.FastStampedProvider", 0.0, 5),
        ("paced 20/s", "bench.providers.PacedStampedProvider", providers.PACE, 0),
        ("paced 20/s, coalesced 5 ms", "bench.providers.PacedStampedProvider", providers.PACE, 5),
    ]
    frames = providers.TOKENS
    bare = daphne("bench.bare_asgi:application", dbs.main, log)
    with bare as bare_port:
        for label, provider, pace, coalesce_ms in cases:
            app = daphne("config.asgi:application", dbs.main, log, provider, coalesce_ms)
            with app as app_port:
                # Issue 15's counts in both modes; coalescing at 50 only in quick mode.
                counts = STAMPED_COUNTS
                if coalesce_ms and not full:
                    counts = (50,)
                for count in counts:
                    print(f"[bench]   {label}, {count} clients", file=sys.stderr, flush=True)
                    url = f"ws://127.0.0.1:{app_port}/ws/answers/"
                    messages = [_ask(i) for i in range(count)]
                    result = _measure(url, app_port, cookies[:count], messages)
                    rate, gaps = _stamped(result)
                    complete = sum(s["outcome"] == "complete" for s in result["streams"])
                    url = f"ws://127.0.0.1:{bare_port}/?frames={frames}&stamp=1&pace={pace}"
                    # Paced bare runs take seconds: best of three only when fast.
                    runs = 3 if not pace else 1
                    floor = min(
                        (_measure(url, bare_port, [""] * count, ["go"] * count)
                         for _ in range(runs)),
                        key=lambda result: result["seconds"],
                    )  # fmt: skip
                    floor_rate, floor_gaps = _stamped(floor)
                    name = f"{label}, {count} clients"
                    note = (
                        f"{complete}/{count} complete, {len(gaps)}/{count * frames} stamps; "
                        f"{result['seconds']:.2f} s vs {floor['seconds']:.2f} s bare"
                    )
                    rows.append(
                        Row(SECTION, f"{name}, tokens/s", rate, floor_rate, "tokens/s",
                            "bare consumer, same frames", (">=", TARGETS[count]), note=note)
                    )  # fmt: skip
                    for fraction, tag in ((0.5, "p50"), (0.99, "p99")):
                        rows.append(
                            Row(SECTION, f"{name}, {tag} emission→arrival",
                                _percentile(gaps, fraction), _percentile(floor_gaps, fraction),
                                "ms", "bare consumer, same frames", None,
                                note=f"STREAM_COALESCE_MS={coalesce_ms}" if tag == "p99" else "")
                        )  # fmt: skip
    return rows


def run(dbs: Databases, log: Path, *, full: bool) -> list[Row]:
    counts = (50, 200, 500) if full else (50, 200)
    cookies = _session_cookies(max(*counts, *STAMPED_COUNTS))
    dbs.release()  # daphne must see the sessions (and nothing may hold the write lock)
    rows = []
    app = daphne("config.asgi:application", dbs.main, log)
    bare = daphne("bench.bare_asgi:application", dbs.main, log)
    with app as app_port, bare as bare_port:
        for count in counts:
            url = f"ws://127.0.0.1:{app_port}/ws/answers/"
            result = _measure(url, app_port, cookies[:count], [_ask(i) for i in range(count)])
            streams, elapsed = result["streams"], result["seconds"]
            tokens = sum(s["tokens"] for s in streams)
            complete = sum(s["outcome"] == "complete" for s in streams)
            # The bare consumer sends what an average answer sent: as many, as long frames.
            frames = max(1, round(tokens / count))
            chars = max(1, round(sum(s["chars"] for s in streams) / max(tokens, 1)))
            url = f"ws://127.0.0.1:{bare_port}/?frames={frames}&chars={chars}"
            # The bare run takes a fraction of a second: keep its best of three.
            floor = min(
                (_measure(url, bare_port, [""] * count, ["go"] * count) for _ in range(3)),
                key=lambda result: result["seconds"],
            )
            floor_tokens = sum(s["tokens"] for s in floor["streams"])
            rows.append(
                Row(SECTION, f"{count} clients, tokens/s", tokens / elapsed,
                    floor_tokens / floor["seconds"], "tokens/s", "bare consumer", None,
                    note=f"{complete}/{count} answers complete, {frames} tokens each on "
                    f"average; {elapsed:.2f} s vs {floor['seconds']:.2f} s bare")
            )  # fmt: skip
    rows += _stamped_rows(log, dbs, cookies, full)
    return rows
