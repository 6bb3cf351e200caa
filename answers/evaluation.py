"""Retrieval evaluation: question sets in JSON Lines, run through the real source selection.

Each line is ``{"question": "...", "expect": ["python-docs:global", ...]}``. An expected
document is named by its ``source_key``, its title, or the end of its source key after a
``/`` (``handbook/expenses.md`` for a file ingested from a folder). An empty ``expect``
means the question is off-topic: it must get the no-answer message (no source survives).
Metrics (docs/evaluation.md): hit@1 and hit@5 over the numbered sources, MRR, the on-topic
abstention rate and the off-topic answer rate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth.models import User

from .models import Document
from .pipeline import retrieve_sources


class EvaluationError(Exception):
    """A question set that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class EvalQuestion:
    file: str
    line: int
    question: str
    expect: tuple[str, ...]
    expect_ids: frozenset[int]


@dataclass(frozen=True)
class EvalResult:
    item: EvalQuestion
    ranked: tuple[str, ...]  # source keys of the numbered sources, in order
    rank: int | None  # 1-based rank of the first expected document, None if absent

    @property
    def on_topic(self) -> bool:
        return bool(self.item.expect)

    @property
    def answered(self) -> bool:
        return bool(self.ranked)


@dataclass
class Metrics:
    name: str
    on_topic: int = 0
    off_topic: int = 0
    hit1: int = 0
    hit5: int = 0
    reciprocal: float = 0.0
    abstained: int = 0
    off_answered: int = 0
    misses: list[EvalResult] = field(default_factory=list)

    def add(self, result: EvalResult) -> None:
        if result.on_topic:
            self.on_topic += 1
            if not result.answered:
                self.abstained += 1
            if result.rank is not None:
                self.reciprocal += 1.0 / result.rank
                self.hit1 += result.rank == 1
                self.hit5 += result.rank <= 5
            if result.rank != 1:
                self.misses.append(result)
        else:
            self.off_topic += 1
            if result.answered:
                self.off_answered += 1
                self.misses.append(result)

    def rates(self) -> dict[str, float | None]:
        on, off = self.on_topic, self.off_topic
        return {
            "hit1": self.hit1 / on if on else None,
            "hit5": self.hit5 / on if on else None,
            "mrr": self.reciprocal / on if on else None,
            "abstain": self.abstained / on if on else None,
            "offtopic": self.off_answered / off if off else None,
        }


def evaluation_user_default() -> User:
    """An unsaved active superuser: sees every document, as the corpus's owner would, and
    leaves nothing in the database."""
    return User(username="evaluation", is_active=True, is_superuser=True, is_staff=True)


def _document_index() -> dict[str, set[int]]:
    index: dict[str, set[int]] = {}
    for pk, key, title in Document.objects.values_list("pk", "source_key", "title"):
        index.setdefault(key, set()).add(pk)
        index.setdefault(title, set()).add(pk)
        tail = key.replace("\\", "/")
        parts = tail.split("/")
        # Every trailing path ("expenses.md", "handbook/expenses.md", ...) names the file.
        for start in range(1, len(parts)):
            index.setdefault("/".join(parts[start:]), set()).add(pk)
    return index


def evaluation_set_load(*, path: Path) -> list[EvalQuestion]:
    """Read and check one JSON Lines file; expected documents must exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvaluationError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    index = _document_index()
    items: list[EvalQuestion] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EvaluationError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise EvaluationError(f"{where}: expected an object with question and expect")
        question = data.get("question")
        expect = data.get("expect")
        if not isinstance(question, str) or not question.strip():
            raise EvaluationError(f"{where}: missing or empty 'question'")
        if not isinstance(expect, list) or not all(isinstance(e, str) for e in expect):
            raise EvaluationError(f"{where}: 'expect' must be a list of titles or source keys")
        ids: set[int] = set()
        for name in expect:
            found = index.get(name)
            if not found:
                raise EvaluationError(f"{where}: no document has the title or source key {name!r}")
            ids |= found
        items.append(
            EvalQuestion(
                file=str(path),
                line=number,
                question=question.strip(),
                expect=tuple(expect),
                expect_ids=frozenset(ids),
            )
        )
    if not items:
        raise EvaluationError(f"{path}: no questions")
    return items


def evaluation_question_run(*, item: EvalQuestion, user: User) -> EvalResult:
    sources = retrieve_sources(user=user, question=item.question).sources
    keys = dict(
        Document.objects.filter(pk__in=[s.document_id for s in sources]).values_list(
            "pk", "source_key"
        )
    )
    rank = next(
        (s.number for s in sources if s.document_id in item.expect_ids),
        None,
    )
    ordered = sorted(sources, key=lambda s: s.number)
    return EvalResult(item=item, ranked=tuple(keys[s.document_id] for s in ordered), rank=rank)


def evaluation_run(*, items: Iterable[EvalQuestion], user: User) -> list[EvalResult]:
    return [evaluation_question_run(item=item, user=user) for item in items]


def evaluation_metrics(*, name: str, results: Sequence[EvalResult]) -> Metrics:
    metrics = Metrics(name=name)
    for result in results:
        metrics.add(result)
    return metrics
