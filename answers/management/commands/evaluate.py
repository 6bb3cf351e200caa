"""Measure retrieval on question sets: hit@1, hit@5, MRR, abstention, off-topic answers."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from answers.evaluation import (
    AnswerMetrics,
    EvaluationError,
    Metrics,
    evaluation_answer_check,
    evaluation_answer_metrics,
    evaluation_metrics,
    evaluation_run,
    evaluation_set_load,
    evaluation_user_default,
    support_agreement,
    support_labels_load,
)
from answers.support import SUPPORTED

FLOORS = (
    # (option, metric, is a minimum, label)
    ("min_hit1", "hit1", True, "hit@1"),
    ("min_hit5", "hit5", True, "hit@5"),
    ("max_abstain", "abstain", False, "on-topic abstention"),
    ("max_offtopic", "offtopic", False, "off-topic answered"),
)


def _split_of(file: str) -> str:
    """``dev`` for ``eval/handbook.dev.jsonl``: the suffix before the last one, if any."""
    suffixes = Path(file).suffixes
    return suffixes[-2].lstrip(".") if len(suffixes) >= 2 else ""


def _short(key: str) -> str:
    """A source key as the table shows it: relative to the current folder when inside it."""
    cwd = str(Path.cwd()) + "/"
    return key[len(cwd) :] if key.startswith(cwd) else key


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# The figures --save writes and --compare sets side by side: (key in Metrics.rates(), header).
COMPARED = (
    ("hit1", "hit@1"),
    ("hit5", "hit@5"),
    ("mrr", "MRR"),
    ("abstain", "abstain"),
    ("offtopic", "off answered"),
    ("dup5", "dup@5"),
)


def _run_record(label: str, rows: list[Metrics]) -> dict[str, Any]:
    return {
        "label": label,
        "rows": [{"name": r.name, "on": r.on_topic, "off": r.off_topic, **r.rates()} for r in rows],
    }


def _is_rate(value: object) -> bool:
    """A share from 0 to 1. A bool is an int to Python, and json.loads reads NaN and
    Infinity: none of them is a rate."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


def _floor(text: str) -> float:
    """A floor option's value (argparse type): a rate, so NaN (which no comparison trips)
    and anything outside 0..1 are refused."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not _is_rate(value):
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, not {text!r}")
    return value


def _run_problem(record: object) -> str | None:
    """What makes ``record`` unusable by --compare (every field it reads), or None."""
    if not isinstance(record, dict):
        return "not an object"
    if not isinstance(record.get("label"), str):
        return "label must be a string"
    rows = record.get("rows")
    if not isinstance(rows, list):
        return "rows must be a list"
    if not rows:
        return "rows is empty"
    names: set[str] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return f"rows[{i}] must be an object"
        name = row.get("name")
        if not isinstance(name, str):
            return f"rows[{i}].name must be a string"
        if name in names:
            # Rows are looked up by name: a second one would hide the first.
            return f"rows[{i}].name {name!r} repeats"
        names.add(name)
        for key, _ in COMPARED:
            # A missing figure shows as "-", as null does.
            value = row.get(key)
            if value is not None and not _is_rate(value):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                return f"rows[{i}].{key} must be a number from 0 to 1 or null, not {shown}"
    return None


def _run_load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CommandError(f"{path}: not a run saved by --save (not UTF-8)") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        problem: str | None = f"not JSON: {exc}"
    except RecursionError:
        problem = "not JSON: nested too deeply"
    except ValueError as exc:
        # An integer too long for Python to convert; the advice after ":" is about Python.
        problem = f"not JSON: {str(exc).split(':', 1)[0]}"
    else:
        problem = _run_problem(record)
    if problem:
        raise CommandError(f"{path}: not a run saved by --save ({problem})")
    return {"label": record["label"], "rows": {row["name"]: row for row in record["rows"]}}


def _save_problem(path: Path) -> str | None:
    """Why ``path`` cannot take a saved run, checked before any question runs (the write at
    the end can still fail: a full disk, the folder removed meanwhile)."""
    folder = path.parent
    try:
        if path.is_dir():
            return "it is a folder"
        if not folder.exists():
            return f"the folder {folder} does not exist"
        if not folder.is_dir():
            return f"{folder} is not a folder"
    except OSError as exc:
        return exc.strerror or str(exc)
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def _write_whole(*, path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    failed write leaves no half-written run, and an earlier one at ``path`` intact."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 is for secrets; a run is not one
        os.replace(temporary, path)
    except BaseException:
        # The original error is the one to report, not a failure to tidy up after it.
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class Command(BaseCommand):
    help = (
        "Run question sets (JSON Lines: {question, expect: [source key or title, ...]}) "
        "through retrieval and source selection, and print hit@1, hit@5, MRR, on-topic "
        "abstention and off-topic answer rates. The --min/--max floors apply to all files "
        "together and make the command fail when missed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="*", type=Path, help="JSON Lines question sets.")
        parser.add_argument(
            "--support-labels",
            type=Path,
            help="Hand-labelled claims (JSON Lines {claim, source, supported}): print how "
            "often the support score agrees with them.",
        )
        parser.add_argument(
            "--user",
            help="Evaluate as this user (their access applies). Default: an unsaved "
            "superuser who sees every document.",
        )
        parser.add_argument("--misses", action="store_true", help="List every miss.")
        parser.add_argument(
            "--answers",
            action="store_true",
            help="Also generate each answer with the configured provider (stores nothing) and "
            "print citation recall and precision (ALCE, with the support score) and the "
            "share of answers whose first cited claim cites an expected document.",
        )
        parser.add_argument(
            "--save",
            type=Path,
            help="Write this run's figures (every row of the table) to FILE as JSON, for "
            "--compare.",
        )
        parser.add_argument(
            "--label", default="this run", help="The run's name in --save and --compare."
        )
        parser.add_argument(
            "--compare",
            type=Path,
            action="append",
            default=[],
            help="A run saved with --save: after the table, print its figures and this run's "
            "side by side (repeatable; with no question sets, the saved runs alone).",
        )
        for option, _, minimum, label in FLOORS:
            parser.add_argument(
                "--" + option.replace("_", "-"),
                type=_floor,
                help=f"Fail if {label} is {'below' if minimum else 'above'} this (0..1).",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        # Given but empty (a variable not set): an error, not the superuser who sees all.
        if options["user"] is not None and not options["user"].strip():
            raise CommandError("--user needs a name (leave it out to evaluate as a superuser).")
        if options["user"]:
            try:
                user = get_user_model().objects.get(username=options["user"])
            except get_user_model().DoesNotExist:
                raise CommandError(f"No user {options['user']!r}.") from None
        else:
            user = evaluation_user_default()
        for option, *_ in FLOORS:
            # call_command(..., min_hit1=x) passes values past argparse and its type.
            if options[option] is not None and not _is_rate(options[option]):
                flag = "--" + option.replace("_", "-")
                raise CommandError(f"{flag} must be a number from 0 to 1, not {options[option]!r}.")
        compared = [_run_load(path) for path in options["compare"]]
        if options["save"]:
            if not options["files"]:
                raise CommandError("--save needs question sets: it saves their figures.")
            problem = _save_problem(options["save"])
            if problem:
                raise CommandError(f"--save {options['save']}: {problem}.")
        if not options["files"] and not options["support_labels"]:
            if compared:
                self._compare(compared)
                return
            raise CommandError("Give question sets, --support-labels FILE, or both.")
        try:
            sets = [(str(path), evaluation_set_load(path=path)) for path in options["files"]]
            labels = (
                support_labels_load(path=options["support_labels"])
                if options["support_labels"]
                else None
            )
        except EvaluationError as exc:
            raise CommandError(str(exc)) from None
        if labels is not None:
            self._agreement(labels)
        if not sets:
            return

        everything: list[Any] = []
        rows: list[Metrics] = []
        for name, items in sets:
            results = evaluation_run(items=items, user=user)
            everything += results
            rows.append(evaluation_metrics(name=name, results=results))
        total = evaluation_metrics(name="all", results=everything)
        splits: dict[str, list[Any]] = {}
        for result in everything:
            split = _split_of(result.item.file)
            if split:
                splits.setdefault(split, []).append(result)
        if len(rows) > 1:
            rows += [
                evaluation_metrics(name=f"split {name}", results=results)
                for name, results in splits.items()
                if len(results) < len(everything)
            ]
            rows.append(total)
        self._table(rows)
        unsaved = None
        if options["save"]:
            record = _run_record(options["label"], rows)
            try:
                _write_whole(path=options["save"], text=json.dumps(record, indent=1) + "\n")
            except OSError as exc:
                # Reported at the end, after the floors: the figures printed are still worth
                # their verdict.
                unsaved = f"not saved to {options['save']} ({exc.strerror or exc})"
        if compared:
            this = _run_record(options["label"], rows)
            self._compare([*compared, {**this, "rows": {r["name"]: r for r in this["rows"]}}])
        if options["answers"]:
            self._answers(sets, user)
        if options["misses"]:
            self._misses(total)

        failures = []
        rates = total.rates()
        for option, metric, minimum, label in FLOORS:
            floor = options[option]
            value = rates[metric]
            if floor is None or value is None:
                continue
            if (value < floor) if minimum else (value > floor):
                bound = "under the floor" if minimum else "over the ceiling"
                failures.append(f"{label} {value:.3f} is {bound} {floor:.3f}")
        message = "Evaluation failed: " + "; ".join(failures) + "." if failures else ""
        if unsaved:
            # Both verdicts: whether the floors held, and why there is no file.
            if failures:
                message += f" The run was {unsaved}."
            elif any(options[option] is not None for option, *_ in FLOORS):
                message = f"The floors held, but the run was {unsaved}."
            else:
                message = f"The run was {unsaved}."
        if message:
            raise CommandError(message)

    def _table(self, rows: list[Metrics]) -> None:
        width = max(len(r.name) for r in rows)
        head = f"{'set':<{width}}  {'on':>4}  {'hit@1':>6}  {'hit@5':>6}  {'MRR':>6}  "
        head += f"{'abstain':>7}  {'off':>4}  {'off answered':>12}  {'dup@5':>6}"
        self.stdout.write(head)
        for r in rows:
            x = r.rates()
            self.stdout.write(
                f"{r.name:<{width}}  {r.on_topic:>4}  {_fmt(x['hit1']):>6}  "
                f"{_fmt(x['hit5']):>6}  {_fmt(x['mrr']):>6}  {_fmt(x['abstain']):>7}  "
                f"{r.off_topic:>4}  {_fmt(x['offtopic']):>12}  {_fmt(x['dup5']):>6}"
            )

    def _compare(self, runs: list[dict[str, Any]]) -> None:
        """Each figure once per run, the runs side by side, for the sets of the first run."""
        names = list(runs[0]["rows"])
        names += [n for run in runs[1:] for n in run["rows"] if n not in names]
        width = max(len("set"), *(len(n) for n in names))
        cell = max(6, *(len(run["label"]) for run in runs))
        group = len(runs) * (cell + 2) - 2
        self.stdout.write("")
        self.stdout.write(
            f"{'':<{width}}  " + "  ".join(f"{header:^{group}}" for _, header in COMPARED)
        )
        labels = "  ".join(f"{run['label']:>{cell}}" for run in runs)
        self.stdout.write(f"{'set':<{width}}  " + "  ".join(labels for _ in COMPARED))
        for name in names:
            cells = []
            for key, _ in COMPARED:
                for run in runs:
                    row = run["rows"].get(name)
                    cells.append(f"{_fmt(row.get(key) if row else None):>{cell}}")
            self.stdout.write(f"{name:<{width}}  " + "  ".join(cells))

    def _answers(self, sets: list[tuple[str, list[Any]]], user: Any) -> None:
        rows: list[AnswerMetrics] = []
        everything: list[Any] = []
        for name, items in sets:
            checks = [
                check
                for item in items
                if item.expect and (check := evaluation_answer_check(item=item, user=user))
            ]
            everything += checks
            rows.append(evaluation_answer_metrics(name=name, checks=checks))
        if len(rows) > 1:
            rows.append(evaluation_answer_metrics(name="all", checks=everything))
        width = max(len(r.name) for r in rows)
        self.stdout.write("")
        self.stdout.write(
            f"{'answers':<{width}}  {'n':>4}  {'cit-recall':>10}  {'cit-precision':>13}  "
            f"{'first from expected':>19}"
        )
        for r in rows:
            self.stdout.write(
                f"{r.name:<{width}}  {r.answers:>4}  {_fmt(r.recall):>10}  "
                f"{_fmt(r.precision):>13}  {_fmt(r.first_expected):>19}"
            )

    def _agreement(self, labels: list[Any]) -> None:
        result = support_agreement(labels=labels)
        self.stdout.write(
            f"support score vs {result.labels} hand labels (unsupported under {SUPPORTED}): "
            f"agreement {result.agree / result.labels:.3f}, flagged precision "
            f"{_fmt(result.flagged_precision)}, flagged recall {_fmt(result.flagged_recall)}"
        )
        for label, score in result.disagreements:
            said = "supported" if label.supported else "unsupported"
            self.stdout.write(f"  line {label.line}: {score:.2f}, labelled {said}: {label.claim}")

    def _misses(self, total: Metrics) -> None:
        self.stdout.write("")
        self.stdout.write("misses (on-topic not first, or off-topic answered):")
        for miss in total.misses:
            item = miss.item
            got = ", ".join(_short(k) for k in miss.ranked[:3]) or "(no answer)"
            rank = "-" if miss.rank is None else str(miss.rank)
            want = ", ".join(item.expect) or "(no answer)"
            self.stdout.write(
                f"{item.file}:{item.line}  rank {rank}  {item.question}\n"
                f"    want: {want}\n    got:  {got}"
            )
