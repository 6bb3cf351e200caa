"""PostgreSQL ingest throughput by schema, taking turns (issue 17; section 10's load).

``python -m bench.topk_ingest [CHUNKS [ROUNDS [SCHEMA ...]]]`` (defaults: 30000, 3, and
the schemas 0010, 0013 and the latest, written ``latest``): per round, each schema in
turn loads the same CHUNKS chunks of section 10's corpus on a fresh database through
section 10's own loading child (``bench.topk``, no searches), the order reversed every
other round, so drift in machine load hits them alike. Prints each load and, per schema,
the median chunks/s and its ratio to the first schema's.
"""

from __future__ import annotations

import sys

from .postgres import _database
from .report import median
from .topk import _child


def main(argv: list[str]) -> None:
    chunks = int(argv[0]) if argv else 30_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    schemas = argv[2:] or ["0010", "0013", "latest"]
    rates: dict[str, list[float]] = {schema: [] for schema in schemas}
    for round_ in range(rounds):
        for schema in schemas if round_ % 2 == 0 else schemas[::-1]:
            with _database() as url:
                result = _child(
                    url, {"load": chunks}, 1, "" if schema == "latest" else schema, timed=False
                )
            figures = result["sizes"]["load"]
            rate = figures["chunks"] / figures["ingest_s"]
            rates[schema].append(rate)
            print(
                f"round {round_ + 1} schema {schema}: {figures['chunks']:,} chunks in "
                f"{figures['ingest_s']:.1f} s, {rate:,.0f} chunks/s",
                flush=True,
            )
    base = median(rates[schemas[0]])
    for schema in schemas:
        rate = median(rates[schema])
        print(f"schema {schema}: median {rate:,.0f} chunks/s, {rate / base:.2f}x {schemas[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
