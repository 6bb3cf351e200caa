"""Section 6's WebSocket load for two or more checkouts, on SQLite, in paired rounds.

``python -m bench.streaming_ab NAME=PATH[@VAR=VALUE...] NAME=PATH... [--rounds N]
[--clients N] [--provider fast|paced]``

The demo corpus on one SQLite database and one daphne per NAME serving the code at PATH
with the extra environment given after ``@`` (as ``bench.scale_out_ab`` takes it; the
in-memory stack: the local-memory cache and channel layer), all up at once, with a
stamped provider (``bench.providers``: 40 tokens as fast as it can, or 20 a second). Each
is warmed with one round, then rounds of N clients asking at once take turns (the order
reversed every round), so drift in the machine's load hits every checkout alike. Prints
each round (seconds to the last close, daphne's CPU an answer, answers complete) and each
checkout's medians. How ADR 0038 was measured; ``bench.scale_out_ab`` is the same for
PostgreSQL + Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

PROVIDERS = {
    "fast": "bench.providers.FastStampedProvider",
    "paced": "bench.providers.PacedStampedProvider",
}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming_ab")
    parser.add_argument("checkouts", nargs="+", metavar="NAME=PATH[@VAR=VALUE...]")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="fast")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="cited-answers-streaming-ab-"))
    try:
        from .__main__ import _environment

        database = _environment(folder)
        import django

        django.setup()
        from . import ingest, streaming
        from .db import Databases
        from .scale_out import _cpu_seconds, taking_turns
        from .scale_out_ab import _checkouts

        checkouts = _checkouts(args.checkouts)
        dbs = Databases(folder, database)
        dbs.migrate()
        ingest.demo_corpus(dbs)
        cookies = streaming._session_cookies(args.clients)
        dbs.release()  # daphne must see the sessions
        messages = [streaming._ask(index) for index in range(args.clients)]
        with contextlib.ExitStack() as servers:
            ports = {
                name: servers.enter_context(
                    streaming.daphne("config.asgi:application", database, folder / "daphne.log",
                                     PROVIDERS[args.provider], env_extra=env,
                                     checkout=Path(path))
                )
                for name, (path, env) in checkouts.items()
            }  # fmt: skip

            def burst(name: str) -> dict[str, Any]:
                port = ports[name]
                pid = streaming.DAPHNE_PIDS[port]
                cpu = _cpu_seconds(pid)
                url = f"ws://127.0.0.1:{port}/ws/answers/"
                result = streaming._measure(url, port, cookies, messages)
                result["cpu_ms"] = 1000 * (_cpu_seconds(pid) - cpu) / args.clients
                complete = sum(s["outcome"] == "complete" for s in result["streams"])
                print(
                    f"{name}: {result['seconds']:.2f} s, daphne CPU {result['cpu_ms']:.1f} ms "
                    f"an answer, {complete}/{args.clients} complete",
                    flush=True,
                )
                return result

            for name in ports:  # the first round pays each process's start
                burst(name)
            rounds = taking_turns({name: (lambda n=name: burst(n)) for name in ports}, args.rounds)
        for name, results in rounds.items():
            seconds = statistics.median(r["seconds"] for r in results)
            cpu_ms = statistics.median(r["cpu_ms"] for r in results)
            print(f"{name}: median {seconds:.2f} s, daphne CPU {cpu_ms:.1f} ms an answer")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
