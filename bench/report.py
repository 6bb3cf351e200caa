"""Rows of figures, the printed table and the JSON file."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


@dataclass(frozen=True)
class Row:
    """One figure: ``ratio`` is always ``value / baseline``; ``target`` bounds the ratio."""

    section: str
    figure: str
    value: float
    baseline: float
    unit: str
    baseline_label: str
    # ("<=", 2.0): the ratio should be at most 2.0 (also ">=", "=="); None: for information.
    target: tuple[str, float] | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        if self.baseline == 0:
            return math.inf if self.value else 1.0
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, bound = self.target
        if op == "==":
            return math.isclose(self.ratio, bound)
        return self.ratio <= bound if op == "<=" else self.ratio >= bound

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["target"] = f"{self.target[0]} {self.target[1]:g}" if self.target else None
        data["ratio"] = None if math.isinf(self.ratio) else round(self.ratio, 4)
        data["met"] = self.met
        return data


def median(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _number(value: float, unit: str) -> str:
    if unit == "s":
        # Seconds read best in the unit that keeps three significant digits.
        if value < 1e-3:
            return f"{value * 1e6:.1f} µs"
        if value < 1:
            return f"{value * 1e3:.2f} ms"
        return f"{value:.2f} s"
    if unit in ("chunks/s", "tokens/s", "events/s"):
        return f"{value:,.0f} {unit}"
    if float(value).is_integer():
        return f"{int(value)} {unit}".strip()
    return f"{value:.3g} {unit}".strip()


def _ratio(row: Row) -> str:
    ratio = row.ratio
    if math.isinf(ratio):
        return "inf"
    return f"{ratio:.3g}" if ratio >= 0.01 else f"{ratio:.2g}"


def render_table(rows: list[Row]) -> str:
    header = ("figure", "value", "baseline", "ratio", "target", "met")
    lines: list[tuple[str, ...]] = []
    section = None
    table: list[tuple[str, ...] | str] = []
    for row in rows:
        if row.section != section:
            section = row.section
            table.append(f"-- {section}")
        target = f"{row.target[0]} {row.target[1]:g}" if row.target else "-"
        met = {True: "yes", False: "NO", None: ""}[row.met]
        cells = (
            row.figure,
            _number(row.value, row.unit),
            f"{_number(row.baseline, row.unit)} ({row.baseline_label})",
            _ratio(row),
            target,
            met,
        )
        lines.append(cells)
        table.append(cells)
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    out = [fmt(header), "  ".join("-" * width for width in widths)]
    out += [item if isinstance(item, str) else fmt(item) for item in table]
    notes = [f"  {row.figure}: {row.note}" for row in rows if row.note]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(line.rstrip() for line in out)


def write_json(rows: list[Row], meta: dict[str, object]) -> Path:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"meta": meta, "rows": [row.as_dict() for row in rows]}, indent=2) + "\n"
    )
    return RESULTS
