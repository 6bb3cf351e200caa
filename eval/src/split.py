"""Rebuild eval/*.{dev,test}.jsonl from the sources here: a random 50/50 split, fixed seed.

.venv/bin/python eval/src/split.py
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import handbook  # noqa: E402
import off_topic  # noqa: E402
import python_docs  # noqa: E402

SEED = 13


def write(name: str, rows: list[dict[str, object]]) -> None:
    rng = random.Random(f"{SEED}:{name}")
    rows = rows[:]
    rng.shuffle(rows)
    half = len(rows) // 2
    for split, part in (("dev", rows[:half]), ("test", rows[half:])):
        path = HERE.parent / f"{name}.{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        print(f"{path.name}: {len(part)}")


write(
    "python-docs",
    [
        {"question": q, "expect": [t if " " in t else f"python-docs:{t}" for t in ts]}
        for q, ts in python_docs.Q
    ],
)
write("off-topic", [{"question": q, "expect": []} for q in off_topic.Q])
write("handbook", [{"question": q, "expect": ts} for q, ts in handbook.Q])
