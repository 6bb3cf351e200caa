"""11. The scale-out stack under load: one daphne on PostgreSQL + Redis against the
in-memory stack (SQLite, the in-memory layer and cache), in the same run.

N WebSocket clients (``bench.ws_clients``), each a different logged-in user, all ask at
the same moment; the offline provider answers. Per N: tokens/s over all sockets, the time
from that moment to each socket's first token (p50, p99), and failures (a socket whose
stream did not end with a stored answer: an ``error``, a closed socket, a refusal).

The PostgreSQL database is created for the run and dropped after it (``bench.postgres``);
``python -m bench.scale_out COUNT`` (a child with ``DATABASE_URL`` set) migrates it, ingests
the demo corpus and prints the users' session cookies. Redis keys go under a prefix of the
run's own, deleted afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import services
from .report import Row

if TYPE_CHECKING:
    from .db import Databases

SECTION = "11. scale-out stack under load (one daphne)"
REPO = Path(__file__).resolve().parent.parent
# Every socket is its own user, and the per-minute limit must not be what is measured.
LIMITS = {"ANSWERS_QUESTIONS_PER_MINUTE": "1000", "ANSWERS_MAX_CONCURRENT_STREAMS": "2"}
ENDED = ("complete", "no_answer")
# Rounds of the first count's answers on each stack, taking turns (odd: one median round).
PAIRED_ROUNDS = 5


def _setup_child(database_url: str, count: int) -> list[str]:
    env = {**os.environ, "DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale_out", str(count)],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"python -m bench.scale_out failed ({done.returncode}), see above")
    cookies: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return cookies


def _why(result: dict[str, Any]) -> str:
    """The commonest reason a socket failed, and how many it was."""
    from collections import Counter

    reasons = Counter(
        s["error"] or s["outcome"] or "closed early"
        for s in result["streams"]
        if s["outcome"] not in ENDED
    )
    return ", ".join(f"{n} x {reason}" for reason, n in reasons.most_common(2))


def _figures(result: dict[str, Any]) -> tuple[float, float, float, int]:
    from .streaming import _percentile

    streams = result["streams"]
    tokens = sum(s["tokens"] for s in streams)
    firsts = [s["first_ms"] for s in streams if s.get("first_ms") is not None]
    failed = sum(s["outcome"] not in ENDED for s in streams)
    return (
        tokens / result["seconds"],
        _percentile(firsts, 0.5),
        _percentile(firsts, 0.99),
        failed,
    )


def _median_round(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose first token p50 is the median, its failures those of every round."""
    ranked = sorted(results, key=lambda result: _figures(result)[1])
    middle = dict(ranked[len(ranked) // 2])
    middle["all_rounds"] = results
    return middle


def taking_turns(
    bursts: dict[str, Callable[[], dict[str, Any]]], rounds: int
) -> dict[str, list[dict[str, Any]]]:
    """Each named burst ``rounds`` times, in turns, the order reversed every round, so that
    drift in this machine's load hits each alike (section 11 and ``bench.scale_out_ab``)."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in bursts}
    for index in range(rounds):
        for name in list(bursts) if index % 2 == 0 else list(reversed(bursts)):
            results[name].append(bursts[name]())
    return results


def _failed(result: dict[str, Any]) -> int:
    """Failed streams of a result, of every round where it was measured in rounds."""
    return sum(_figures(r)[3] for r in result.get("all_rounds", [result]))


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (Linux; 0 where /proc is not there)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _redis_pids() -> list[int]:
    """The local redis-server's process, when Redis runs on this machine."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if entry.read_bytes().startswith(b"redis-server"):
                pids.append(int(entry.parent.name))
    return pids


def _postgres_pids(database_url: str) -> list[int]:
    """The server processes of the run's PostgreSQL database (its sessions: the pool)."""
    from urllib.parse import urlsplit

    name = urlsplit(database_url).path.lstrip("/")
    with services.postgres_admin() as admin:
        rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [name])
        return [int(row[0]) for row in rows.fetchall()]


def _burst(port: int, cookies: list[str], count: int, database_url: str = "") -> dict[str, Any]:
    """``count`` answers asked at once, and the CPU an answer took: daphne's, and on
    PostgreSQL + Redis their server processes' (on this machine they share its cores with
    daphne)."""
    from .streaming import DAPHNE_PIDS, _ask, _measure

    print(f"[bench]   {count} clients", file=sys.stderr, flush=True)
    processes = {"daphne": [DAPHNE_PIDS[port]]}
    if database_url:
        processes |= {"PostgreSQL": _postgres_pids(database_url), "Redis": _redis_pids()}
    before = {name: sum(map(_cpu_seconds, pids)) for name, pids in processes.items()}
    url = f"ws://127.0.0.1:{port}/ws/answers/"
    out = _measure(url, port, cookies[:count], [_ask(i) for i in range(count)])
    out["cpu_ms"] = {
        name: (sum(map(_cpu_seconds, pids)) - before[name]) * 1000 / count
        for name, pids in processes.items()
    }
    return out


def _cpu_note(result: dict[str, Any]) -> str:
    return ", ".join(f"{name} {ms:.0f}" for name, ms in result.get("cpu_ms", {}).items())


def _measure_apart(ports: list[int], cookies: list[str]) -> dict[str, Any]:
    """One client process per server, started together; the streams of all, and the
    longest run."""
    from .streaming import RUN_TIMEOUT, _ask

    share = len(cookies) // len(ports)
    children = []
    for index, port in enumerate(ports):
        mine = cookies[index * share : (index + 1) * share]
        spec = {
            "url": f"ws://127.0.0.1:{port}/ws/answers/",
            "origin": f"http://127.0.0.1:{port}",
            "cookies": mine,
            "messages": [_ask(i) for i in range(len(mine))],
            "timeout": RUN_TIMEOUT * 2,
        }
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.ws_clients"], cwd=REPO, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None
        child.stdin.write(json.dumps(spec))
        child.stdin.close()
        children.append(child)
    results = []
    for child in children:
        assert child.stdout is not None and child.stderr is not None
        out, err = child.stdout.read(), child.stderr.read()
        child.wait(timeout=RUN_TIMEOUT * 2 + 30)
        if child.returncode:
            raise RuntimeError(f"the WebSocket clients failed:\n{err[-3000:]}")
        results.append(json.loads(out))
    return {
        "seconds": max(r["seconds"] for r in results),
        "streams": [s for r in results for s in r["streams"]],
    }


def run(dbs: Databases, log: Path, *, full: bool) -> list[Row]:
    # Imported here: the child (``_setup``) loads Django before anything that needs it.
    from .postgres import _database
    from .streaming import _session_cookies, daphne

    services.require_redis()
    counts = (50, 200, 500)
    pair = 2 * max(counts)  # two processes behind one Redis
    cookies = _session_cookies(max(counts))
    dbs.release()
    memory = {"REDIS_URL": "", **LIMITS}
    prefix = services.unique_prefix()
    rows = []
    alone: dict[Any, Any] = {}
    stacked: dict[Any, Any] = {}
    try:
        with contextlib.ExitStack() as servers:
            mem_port = servers.enter_context(
                daphne("config.asgi:application", dbs.main, log, env_extra=memory)
            )
            database_url = servers.enter_context(_database())
            pg_cookies = _setup_child(database_url, pair)
            scaled = {
                "DATABASE_URL": database_url,
                "REDIS_URL": services.REDIS_URL,
                "CHANNEL_PREFIX": prefix,
                "CACHE_PREFIX": prefix,
                **LIMITS,
            }
            port = servers.enter_context(
                daphne("config.asgi:application", dbs.main, log, env_extra=scaled)
            )
            stacks = {
                "in-memory": (mem_port, cookies, ""),
                "PostgreSQL + Redis": (port, pg_cookies, database_url),
            }
            # The first burst after a start also pays the process's start (templates
            # compiled, each pooled PostgreSQL session's catalog caches filled, SQLite's
            # schema read): kept apart ("cold"); the rows below measure running servers.
            for name, (at, keys, url) in stacks.items():
                print(f"[bench]   {name}: first burst", file=sys.stderr, flush=True)
                (alone if not url else stacked)["cold"] = _burst(at, keys, counts[0], url)
            # Both servers run all along and take turns, the first count in paired rounds
            # (this machine's load drifts between one burst and the next: the figure is the
            # median of each stack's rounds, and every round's ratio is in the notes).
            paired = taking_turns(
                {
                    name: functools.partial(_burst, at, keys, counts[0], url)
                    for name, (at, keys, url) in stacks.items()
                },
                PAIRED_ROUNDS,
            )
            alone[counts[0]] = _median_round(paired["in-memory"])
            stacked[counts[0]] = _median_round(paired["PostgreSQL + Redis"])
            for count in counts[1:]:
                for name, (at, keys, url) in stacks.items():
                    print(f"[bench]   {name}", file=sys.stderr, flush=True)
                    (alone if not url else stacked)[count] = _burst(at, keys, count, url)
            with daphne("config.asgi:application", dbs.main, log, env_extra=scaled) as other:
                print(f"[bench]   two processes, {pair} clients", file=sys.stderr, flush=True)
                both = _measure_apart([port, other], pg_cookies[:pair])
    finally:
        services.delete_redis_keys(prefix)
    base_rate = _figures(stacked[counts[0]])[0]
    for count in counts:
        rate, p50, p99, _ = _figures(stacked[count])
        m_rate, m_p50, m_p99, _ = _figures(alone[count])
        failed, m_failed = _failed(stacked[count]), _failed(alone[count])
        asked = count * len(stacked[count].get("all_rounds", [None]))
        note = (
            f"{failed}/{asked} failed on PostgreSQL + Redis, {m_failed}/{asked} in memory; "
            f"first token p99 {p99:,.0f} ms vs {m_p99:,.0f} ms"
        )
        if failed:
            note += f"; failures: {_why(stacked[count])}"
        cpu = (
            f"CPU an answer (ms): {_cpu_note(stacked[count])}; in memory: {_cpu_note(alone[count])}"
        )
        if "all_rounds" in stacked[count]:
            pairs = zip(alone[count]["all_rounds"], stacked[count]["all_rounds"], strict=True)
            ratios = [_figures(p)[1] / max(_figures(m)[1], 1e-9) for m, p in pairs]
            note += (
                f"; the median of {len(ratios)} rounds taking turns, each round's ratio "
                + " / ".join(f"{r:.2f}" for r in ratios)
            )
        rows += [
            Row(SECTION, f"{count} answers, tokens/s, PostgreSQL + Redis", rate, m_rate,
                "tokens/s", "in-memory stack", None, note=note),
            Row(SECTION, f"{count} answers, first token p50, PostgreSQL + Redis", p50, m_p50,
                "ms", "in-memory stack", ("<=", 1.5) if count == counts[0] else None,
                note=cpu),
            Row(SECTION, f"{count} answers, failures, PostgreSQL + Redis", failed, 0, "",
                "none", None),
        ]  # fmt: skip
        if count != counts[0]:
            rows.append(
                Row(SECTION, f"{count} answers, tokens/s against 50", rate, base_rate,
                    "tokens/s", f"{counts[0]} answers, same stack", (">=", 0.9))
            )  # fmt: skip
    _, p50, _, failed = _figures(stacked["cold"])
    _, m_p50, _, m_failed = _figures(alone["cold"])
    rows.append(
        Row(SECTION, f"{counts[0]} answers, first token p50, first burst after start", p50,
            m_p50, "ms", "in-memory stack, first burst", None,
            note=f"{failed}/{counts[0]} failed on PostgreSQL + Redis, {m_failed} in memory")
    )  # fmt: skip
    rate, p50, p99, failed = _figures(both)
    note = f"{failed}/{pair} failed; first token p99 {p99:,.0f} ms"
    if failed:
        note += f"; failures: {_why(both)}"
    rows.append(
        Row(SECTION, f"two processes, {pair} answers, tokens/s", rate, base_rate, "tokens/s",
            f"{counts[0]} answers, one process", None, note=note)
    )  # fmt: skip
    rows.append(
        Row(SECTION, f"two processes, {pair} answers, failures", failed, 0, "", "none", None)
    )
    return rows


def _setup(count: int) -> None:
    """In the child: migrate, ingest the demo corpus, print ``count`` session cookies."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    import io

    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("ingest", python_docs=True, no_progress=True, stdout=io.StringIO())
    from .streaming import _session_cookies

    print(json.dumps(_session_cookies(count)))


if __name__ == "__main__":
    _setup(int(sys.argv[1]))
