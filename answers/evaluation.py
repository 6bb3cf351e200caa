"""Retrieval evaluation: question sets in JSON Lines, run through the real source selection.

Each line is ``{"question": "...", "expect": ["python-docs:global", ...]}``. An expected
document is named by its ``source_key``, its title, or the end of its source key after a
``/`` (``handbook/expenses.md`` for a file ingested from a folder). An empty ``expect``
means the question is off-topic: it must get the no-answer message (no source survives).
Metrics (docs/evaluation.md): hit@1 and hit@5 over the numbered sources, MRR, the on-topic
abstention rate, the off-topic answer rate and dup@5 (two near-duplicates among the first
five sources).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from .citations import finalize_citations, strip_out_of_range_markers
from .conf import SETTINGS, answers_settings
from .duplicates import signature_similarity
from .models import Chunk, Document
from .pipeline import retrieve_sources
from .prompt import Prompt
from .registry import get_provider
from .support import SUPPORTED, CitationQuality, citation_quality, claim_support, passage_terms
from .types import NumberedSource


class EvaluationError(Exception):
    """A question set that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class EvalQuestion:
    """One question of a set: where it was read, and the documents that answer it."""

    question: str
    expect: tuple[str, ...]
    expect_ids: frozenset[int]
    file: str
    line: int


@dataclass(frozen=True)
class EvalResult:
    item: EvalQuestion
    ranked: tuple[str, ...]  # source keys of the numbered sources, in order
    rank: int | None  # 1-based rank of the first expected document, None if absent
    # Two of sources [1]-[5] are near-duplicates of each other (answers.duplicates).
    duplicate_top5: bool = False

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
    duplicate_top5: int = 0
    misses: list[EvalResult] = field(default_factory=list)

    def add(self, result: EvalResult) -> None:
        if result.on_topic:
            self.on_topic += 1
            if not result.answered:
                self.abstained += 1
            self.duplicate_top5 += result.duplicate_top5
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
            "dup5": self.duplicate_top5 / on if on else None,
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


def _json_lines(*, path: Path) -> Iterator[tuple[int, Any]]:
    """Each value of a JSON Lines file with its 1-based line number; blank lines and lines
    starting with ``#`` are skipped. Anything unreadable is an EvaluationError naming the
    file (and the line, when there is one)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvaluationError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    # A byte-order mark, as editors on Windows write one, is not part of the first line
    # (ingest reads such files too).
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = bom + exc.start  # the file's own offset
        line = data.count(b"\n", 0, at) + 1
        raise EvaluationError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[at]:02x} at offset {at} "
            "of the file); save it as UTF-8"
        ) from None
    # JSON Lines ends lines with "\n" only: str.splitlines() would also split on U+2028,
    # U+0085 and the like, which JSON allows raw inside a string. A "\r" before the "\n"
    # (files written on Windows) is dropped.
    for number, ended in enumerate(text.split("\n"), start=1):
        raw = ended.removesuffix("\r")
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EvaluationError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            # Deep nesting ("[[[[...") exhausts the parser's stack: a bad line like any other.
            raise EvaluationError(f"{path}:{number}: not valid JSON (nested too deeply)") from None
        except ValueError as exc:
            # An integer too long for Python to convert; the advice after ":" is about
            # Python's settings, not the file.
            reason = str(exc).split(":", 1)[0]
            raise EvaluationError(f"{path}:{number}: not valid JSON ({reason})") from None
        yield number, value


def evaluation_set_load(*, path: Path) -> list[EvalQuestion]:
    """Read and check one JSON Lines file; expected documents must exist."""
    index = _document_index()
    items: list[EvalQuestion] = []
    for number, data in _json_lines(path=path):
        where = f"{path}:{number}"
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


def duplicate_similarity() -> float:
    """The similarity at which dup@5 counts two sources as near-duplicates: the rule's
    setting, or its declared default when the rule is off (so off and on are measured alike)."""
    value = float(answers_settings.NEAR_DUPLICATE_SIMILARITY)
    if value > 0:
        return value
    return float(next(s.default for s in SETTINGS if s.name == "NEAR_DUPLICATE_SIMILARITY"))


def evaluation_question_run(*, item: EvalQuestion, user: User) -> EvalResult:
    sources = retrieve_sources(user=user, question=item.question).sources
    rows = Document.objects.filter(pk__in=[s.document_id for s in sources]).values_list(
        "pk", "source_key", "near_signature"
    )
    keys = {pk: key for pk, key, _ in rows}
    signatures = {pk: bytes(signature or b"") for pk, _, signature in rows}
    rank = next(
        (s.number for s in sources if s.document_id in item.expect_ids),
        None,
    )
    ordered = sorted(sources, key=lambda s: s.number)
    top = [signatures[s.document_id] for s in ordered[:5]]
    similarity = duplicate_similarity()
    duplicate = any(
        signature_similarity(a, b) >= similarity for i, a in enumerate(top) for b in top[i + 1 :]
    )
    return EvalResult(
        item=item,
        ranked=tuple(keys[s.document_id] for s in ordered),
        rank=rank,
        duplicate_top5=duplicate,
    )


def evaluation_run(*, items: Iterable[EvalQuestion], user: User) -> list[EvalResult]:
    return [evaluation_question_run(item=item, user=user) for item in items]


def evaluation_metrics(*, name: str, results: Sequence[EvalResult]) -> Metrics:
    metrics = Metrics(name=name)
    for result in results:
        metrics.add(result)
    return metrics


# --- Answers: citation quality and the first sentence (``--answers``) ----------------------


@dataclass(frozen=True)
class AnswerCheck:
    item: EvalQuestion
    quality: CitationQuality
    # The first cited claim cites an expected document (None: the answer cites nothing).
    first_expected: bool | None


async def _generate(prompt: Prompt) -> str:
    parts = [d async for d in get_provider().stream(prompt) if isinstance(d, str)]
    return "".join(parts)


def evaluation_answer_check(*, item: EvalQuestion, user: User) -> AnswerCheck | None:
    """Generate the answer to ``item`` with the configured provider (stores nothing) and
    measure its citations; None when retrieval finds no source (no answer to measure)."""
    sources: list[NumberedSource] = retrieve_sources(user=user, question=item.question).sources
    if not sources:
        return None
    prompt = Prompt(question=item.question, sources=tuple(s.as_prompt_source() for s in sources))
    raw = async_to_sync(_generate)(prompt)
    finalized = finalize_citations(strip_out_of_range_markers(raw, len(sources)), sources)
    if finalized.fallback:
        return AnswerCheck(item, CitationQuality(0, 0, 0, 0), None)
    passages = {
        number: [c.text for c in source.candidates]
        for number, source in enumerate(finalized.sources, start=1)
    }
    quality = citation_quality(finalized.text, passages)
    # Final numbers are in first-citation order: [1] is what the first claim cites.
    first = finalized.sources[0].document_id in item.expect_ids if quality.claims else None
    return AnswerCheck(item, quality, first)


@dataclass(frozen=True)
class AnswerMetrics:
    name: str
    answers: int
    recall: float | None
    precision: float | None
    first_expected: float | None


def evaluation_answer_metrics(*, name: str, checks: Sequence[AnswerCheck]) -> AnswerMetrics:
    claims = sum(c.quality.claims for c in checks)
    citations = sum(c.quality.citations for c in checks)
    judged = [c.first_expected for c in checks if c.first_expected is not None]
    return AnswerMetrics(
        name=name,
        answers=len(checks),
        recall=sum(c.quality.supported_claims for c in checks) / claims if claims else None,
        precision=sum(c.quality.relevant for c in checks) / citations if citations else None,
        first_expected=sum(judged) / len(judged) if judged else None,
    )


# --- Calibration of the support score (``--support-labels``) ------------------------------


@dataclass(frozen=True)
class SupportLabel:
    line: int
    claim: str
    source: str
    supported: bool


def support_labels_load(*, path: Path) -> list[SupportLabel]:
    """Hand-labelled ``{"claim", "source", "supported"}`` lines; sources must exist."""
    known = set(Document.objects.values_list("source_key", flat=True))
    labels = []
    for number, data in _json_lines(path=path):
        if not (
            isinstance(data, dict)
            and isinstance(data.get("claim"), str)
            and isinstance(data.get("source"), str)
            and isinstance(data.get("supported"), bool)
        ):
            raise EvaluationError(
                f"{path}:{number}: expected {{claim: str, source: str, supported: bool}}"
            )
        if data["source"] not in known:
            raise EvaluationError(f"{path}:{number}: no document {data['source']!r}")
        labels.append(SupportLabel(number, data["claim"], data["source"], data["supported"]))
    if not labels:
        raise EvaluationError(f"{path}: no labels")
    return labels


@dataclass(frozen=True)
class SupportAgreement:
    labels: int
    agree: int
    # Of the claims the score calls unsupported, the share a person did too; and of the
    # claims a person called unsupported, the share the score caught.
    flagged_precision: float | None
    flagged_recall: float | None
    disagreements: tuple[tuple[SupportLabel, float], ...]


def support_agreement(*, labels: Sequence[SupportLabel]) -> SupportAgreement:
    texts: dict[str, list[str]] = {}
    for key, chunk_text in Chunk.objects.filter(
        document__source_key__in={label.source for label in labels}
    ).values_list("document__source_key", "text"):
        texts.setdefault(key, []).append(chunk_text)
    terms = {key: passage_terms(" ".join(parts)) for key, parts in texts.items()}
    agree = flagged = flagged_right = unsupported = 0
    disagreements = []
    for label in labels:
        score = claim_support(label.claim, terms.get(label.source, frozenset()))
        says_supported = score >= SUPPORTED
        if says_supported == label.supported:
            agree += 1
        else:
            disagreements.append((label, score))
        if not says_supported:
            flagged += 1
            flagged_right += not label.supported
        unsupported += not label.supported
    return SupportAgreement(
        labels=len(labels),
        agree=agree,
        flagged_precision=flagged_right / flagged if flagged else None,
        flagged_recall=flagged_right / unsupported if unsupported else None,
        disagreements=tuple(disagreements),
    )
