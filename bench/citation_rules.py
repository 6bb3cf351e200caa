"""1. The citation rules on long answers, against one ``re.sub`` over the same text."""

from __future__ import annotations

import random
import re
from pydoc_data.topics import topics

from answers.citations import finalize_citations, strip_out_of_range_markers

from .report import Row
from .timing import per_call

SECTION = "1. citation rules (strip + finalize)"
SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
SOURCE_COUNTS = (10, 200)
_FLOOR = re.compile(r"\[(\d+)\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _sentences() -> list[str]:
    found = []
    # Real prose (the demo corpus text); no Django needed.
    for _, text in sorted(topics.items()):
        for sentence in _SENTENCE.split(" ".join(text.split())):
            if 30 <= len(sentence) <= 300 and "[" not in sentence and "`" not in sentence:
                found.append(sentence)
    return found


def generate_answer(size: int, sources: int, *, seed: int = 0) -> str:
    """Markdown like a model writes it: prose with markers (some groups, a few out of
    range), inline code, links, and now and then a fenced block the rules must skip."""
    rng = random.Random(seed)
    sentences = _sentences()
    parts: list[str] = []
    length = 0
    while length < size:
        paragraph = []
        for _ in range(rng.randint(2, 5)):
            sentence = rng.choice(sentences)
            roll = rng.random()
            if roll < 0.45:
                sentence += f" [{rng.randint(1, sources)}]"
            elif roll < 0.55:
                sentence += f" [{rng.randint(1, sources)}, {rng.randint(1, sources)}]"
            elif roll < 0.58:
                sentence += f" [{sources + rng.randint(1, 5)}]"  # out of range: stripped
            elif roll < 0.63:
                sentence += " See `items[0]` and [the docs](https://docs.python.org/3/)."
            paragraph.append(sentence)
        if rng.random() < 0.05:
            paragraph.append("\n```python\nvalues[1] = [2]  # not a citation\n```\n")
        part = " ".join(paragraph)
        parts.append(part)
        length += len(part) + 2
    return "\n\n".join(parts)[:size]


def _rules(text: str, sources: list[int]) -> str:
    stripped = strip_out_of_range_markers(text, len(sources))
    return finalize_citations(stripped, sources).text


def _floor_table(sources: list[int]) -> dict[str, str]:
    return {str(n): f"[{len(sources) - n + 1}]" for n in sources}


def _floor(text: str, table: dict[str, str]) -> str:
    # One pass that rewrites every "[n]" from a ready table: the least renumbering can cost.
    return _FLOOR.sub(lambda m: table.get(m[1], ""), text)


def run(*, full: bool) -> list[Row]:
    rows: list[Row] = []
    for count in SOURCE_COUNTS:
        sources = list(range(1, count + 1))
        table = _floor_table(sources)
        per_byte: dict[str, float] = {}
        for label, size in SIZES.items():
            text = generate_answer(size, count)
            rules = per_call(lambda text=text, sources=sources: _rules(text, sources))
            floor = per_call(lambda text=text, table=table: _floor(text, table))
            per_byte[label] = rules / len(text)
            rows.append(
                Row(SECTION, f"{label}, {count} sources", rules, floor, "s", "re.sub floor",
                    ("<=", 2.0))
            )  # fmt: skip
        rows.append(
            Row(
                SECTION,
                f"linearity 100 KB -> 1 MB, {count} sources",
                per_byte["1 MB"] * 1e6,
                per_byte["100 KB"] * 1e6,
                "s",
                "s/MB at 100 KB",
                ("<=", 1.5),
                note="time per byte at 1 MB over time per byte at 100 KB; 1.0 is linear",
            )
        )
    return rows
