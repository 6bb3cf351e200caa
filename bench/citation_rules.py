"""1. The citation rules on long answers, against one ``re.sub`` over the same text; and
the stream filter, against its own cost at a smaller size (how it grows)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from pydoc_data.topics import topics

from answers.citations import (
    MarkerStreamFilter,
    finalize_citations,
    strip_out_of_range_markers,
)

from .report import Row
from .timing import per_call

SECTION = "1. citation rules (strip + finalize)"
STREAM_SECTION = "1b. citation stream filter"
SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
SOURCE_COUNTS = (10, 200)
_FLOOR = re.compile(r"\[(\d+)\]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# The budgets for the stream filter (seconds of CPU for the whole answer).
STREAM_BUDGET = 0.2


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
    # A fresh string each call, as each answer is: the rules remember only the last text.
    text = text[:1] + text[1:]
    stripped = strip_out_of_range_markers(text, len(sources))
    return finalize_citations(stripped, sources).text


def _floor_table(sources: list[int]) -> dict[str, str]:
    return {str(n): f"[{len(sources) - n + 1}]" for n in sources}


def _floor(text: str, table: dict[str, str]) -> str:
    # One pass that rewrites every "[n]" from a ready table: the least renumbering can cost.
    return _FLOOR.sub(lambda m: table.get(m[1], ""), text)


def _stream_seconds(text: str, delta_size: int, count: int) -> float:
    """CPU seconds the filter takes for ``text`` fed in ``delta_size``-character deltas."""
    deltas = [text[i : i + delta_size] for i in range(0, len(text), delta_size)]
    best = float("inf")
    for _ in range(3):
        stream_filter = MarkerStreamFilter(count)
        start = time.process_time()
        for delta in deltas:
            stream_filter.feed(delta)
        stream_filter.close()
        best = min(best, time.process_time() - start)
    return best


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
                    ("<=", 3.0))
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
    return rows + stream_rows()


def stream_rows() -> list[Row]:
    """How the stream filter's cost grows, and the issue's two budgets."""
    rows: list[Row] = []
    # Per delta at 32,000 deltas against per delta at 500, on the same kind of answer.
    long_text = generate_answer(128_000, 10, seed=1)
    short_text = long_text[:2_000]
    long = _stream_seconds(long_text, 4, 10) / (len(long_text) / 4)
    short = _stream_seconds(short_text, 4, 10) / (len(short_text) / 4)
    rows.append(
        Row(STREAM_SECTION, "per delta at 32,000 deltas (4 chars each)", long, short, "s",
            "per delta at 500 deltas", ("<=", 1.3), note="1.0 is linear")
    )  # fmt: skip
    answer = generate_answer(20_000, 10, seed=2)
    batch = per_call(lambda: strip_out_of_range_markers(answer, 10))
    seconds = _stream_seconds(answer, 4, 10)
    rows.append(
        Row(STREAM_SECTION, "20 KB answer in 4-character deltas, filter CPU", seconds,
            STREAM_BUDGET, "s", "the 0.2 s budget", ("<=", 1.0),
            note=f"{seconds / batch:.1f}x one strip of the whole answer ({batch * 1e3:.1f} ms)")
    )  # fmt: skip
    # Answers that made the filter quadratic (one dropped marker a line; valid and dropped
    # markers alternating): seconds at 16 KB over four times those at 4 KB.
    for label, unit in (("'[9]\\n' lines", "[9]\n"), ("'x [1] [9] ' runs", "x [1] [9] ")):
        small = _stream_seconds(unit * (4_000 // len(unit)), 4, 2)
        large = _stream_seconds(unit * (16_000 // len(unit)), 4, 2)
        rows.append(
            Row(STREAM_SECTION, f"{label}, streamed: 16 KB over 4x 4 KB", large, 4 * small,
                "s", "4x the 4 KB time", ("<=", 1.5), note="1.0 is linear")
        )  # fmt: skip
    rows += pathological_rows()
    poisoned = "[x](" * 2_000
    seconds = _stream_seconds(poisoned, 4, 10)
    rows.append(
        Row(STREAM_SECTION, "8 KB of '[x](' on one line, streamed", seconds, STREAM_BUDGET,
            "s", "the 0.2 s budget", ("<=", 1.0),
            note="a poisoned document echoed by the model")
    )  # fmt: skip
    return rows


def _best_of_three(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def _one_space_deltas(spaces: int) -> None:
    stream_filter = MarkerStreamFilter(1)
    stream_filter.feed("a")
    for _ in range(spaces):
        stream_filter.feed(" ")
    stream_filter.feed("b")
    stream_filter.close()


# Inputs that once cost time quadratic in one line's length (2026-12-08), each at n and
# 8n: (label, n, the work for a size).
PATHOLOGICAL: tuple[tuple[str, int, Callable[[int], object]], ...] = (
    ("a line of dropped markers, 'a [9]b' x n", 2_500,
     lambda n: strip_out_of_range_markers("x" + "a [9]b" * n, 1)),
    ("dropped markers after a long run of '-'", 2_500,
     lambda n: strip_out_of_range_markers("-" * (6 * n) + "[9]a" * n, 1)),
    ("dropped markers among '&' (entity look-ups)", 2_500,
     lambda n: strip_out_of_range_markers("x" + "&a [9]b" * n, 1)),
    ("markers with ideographic spaces, 'a[\u30009\u3000]' x n", 1_000,
     lambda n: strip_out_of_range_markers("x " + "a[\u30009\u3000]" * n, 1)),
    ("' -' x n after a dropped line (a possible underline)", 2_000,
     lambda n: strip_out_of_range_markers("a\n[9]\n" + " -" * n + "x", 1)),
    ("a line of n spaces, streamed in 4-character deltas", 4_000,
     lambda n: _stream_seconds("a\n" + " " * n + "b", 4, 1)),
    ("n spaces streamed one a delta", 3_000, _one_space_deltas),
)  # fmt: skip


def pathological_rows() -> list[Row]:
    """How the inputs that were once quadratic grow now: time at 8n over 8x the time at n
    (CPU time, best of three; 1.0 is linear)."""
    rows: list[Row] = []
    for label, n, work in PATHOLOGICAL:
        small = _best_of_three(lambda work=work, n=n: work(n))
        large = _best_of_three(lambda work=work, n=n: work(8 * n))
        rows.append(
            Row(STREAM_SECTION, f"linearity: {label}, 8n over n", large, 8 * small, "s",
                "8x the time at n", ("<=", 1.5), note=f"n = {n:,}; 1.0 is linear")
        )  # fmt: skip
    return rows
