"""Section 11's first-token figure for two or more checkouts, in paired rounds.

``python -m bench.scale_out_ab NAME=PATH[@VAR=VALUE...] NAME=PATH... [--rounds N] [--answers N]``

One daphne per NAME on PostgreSQL + Redis, each running the code at PATH (its working
directory and ``PYTHONPATH``: daphne puts "." first on ``sys.path``; until 2026-12-07 every
daphne ran this checkout's code whatever PATH said, ADR 0036) with the extra environment
given after ``@`` (``B=/work/main@PGOPTIONS=-c synchronous_commit=off``), all on one
database and one Redis, all up at once. Each is warmed with one round, then the rounds of
N answers asked at once take turns (the order reversed every round), so drift in the
machine's load hits every checkout alike. Prints each round (first token p50 and p99,
tokens/s, failures, CPU an answer of daphne and the PostgreSQL server) and each
checkout's median first token p50.

How ADR 0029's changes were compared before they were kept or dropped: on a 2-core machine
one run of a checkout can differ from the next by 20 %, so a change is judged on the
medians of rounds taken in turn, never on two separate runs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
from pathlib import Path
from typing import Any


def _checkouts(specs: list[str]) -> dict[str, tuple[str, dict[str, str]]]:
    checkouts = {}
    for spec in specs:
        name, _, rest = spec.partition("=")
        path, *assignments = rest.split("@")
        if not name or not Path(path, "answers").is_dir():
            raise SystemExit(f"not NAME=PATH of a checkout: {spec!r}")
        env = dict(assignment.split("=", 1) for assignment in assignments)
        checkouts[name] = (str(Path(path).resolve()), env)
    return checkouts


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out_ab")
    parser.add_argument("checkouts", nargs="+", metavar="NAME=PATH[@VAR=VALUE...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--answers", type=int, default=50)
    args = parser.parse_args(argv)
    checkouts = _checkouts(args.checkouts)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from . import services
    from .postgres import _database
    from .scale_out import LIMITS, _burst, _figures, _setup_child, taking_turns

    services.require_redis()
    log = Path("/tmp/scale-out-ab-daphne.log")
    prefix = services.unique_prefix()
    medians: dict[str, list[float]] = {name: [] for name in checkouts}
    try:
        with _database() as url, contextlib.ExitStack() as servers:
            from .streaming import daphne

            cookies = _setup_child(url, args.answers)
            shared = {
                "DATABASE_URL": url,
                "REDIS_URL": services.REDIS_URL,
                "CHANNEL_PREFIX": prefix,
                "CACHE_PREFIX": prefix,
                **LIMITS,
            }
            # The SQLite path is the in-memory stack's; every daphne here uses DATABASE_URL.
            unused = Path(log.parent, "scale-out-ab.sqlite3")
            ports = {
                name: servers.enter_context(
                    daphne("config.asgi:application", unused, log,
                           env_extra={**shared, "PYTHONPATH": path, **env})
                )
                for name, (path, env) in checkouts.items()
            }  # fmt: skip
            for port in ports.values():  # the first burst pays the process's start
                _burst(port, cookies, args.answers, url)

            def burst(name: str) -> dict[str, Any]:
                result = _burst(ports[name], cookies, args.answers, url)
                rate, p50, p99, failed = _figures(result)
                cpu = ", ".join(f"{k} {v:.0f}" for k, v in result["cpu_ms"].items())
                print(
                    f"{name}: first token p50 {p50:,.0f} ms, p99 {p99:,.0f}; "
                    f"{rate:,.0f} tokens/s; {failed} failed; CPU an answer (ms): {cpu}",
                    flush=True,
                )
                return result

            rounds = taking_turns(
                {name: functools.partial(burst, name) for name in ports}, args.rounds
            )
            for name, results in rounds.items():
                medians[name] = [_figures(result)[1] for result in results]
    finally:
        services.delete_redis_keys(prefix)
    for name, values in medians.items():
        rounds = " / ".join(f"{v:,.0f}" for v in values)
        print(f"{name}: median first token p50 {statistics.median(values):,.0f} ms ({rounds})")


if __name__ == "__main__":
    main(sys.argv[1:])
