"""The content-gap report: questions the corpus did not answer well, grouped (ADR 0024).

A question is a *gap* when it got the no-answer message, was voted down, or an answer
citation's support is weak (``support.SUPPORTED``). Similar questions are grouped by the
words they share, as the search stems them: a question joins the first group whose words it
shares at least ``SIMILAR`` of (Jaccard) with, else starts one. Groups come out largest
first, each with its counts per week, its reasons, a few examples and the documents that
came nearest (retrieved but under the threshold), so a document owner sees what to write.

Pure (no Django): ``selectors.gap_questions_for_review`` reads what a reviewer may see.
Grouping is one pass, each question compared with the groups so far: at most ``limit``
questions (the newest) are grouped, so the cost is bounded whatever the history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from .ranking import question_stems
from .search.stemming import stem_text
from .support import FUNCTION_WORDS

# Words such as "is" and "for" are searched (they are keywords in code) but say nothing
# about what a question lacks: they neither group questions nor label a group.
_FUNCTION_STEMS = frozenset(stem_text(" ".join(FUNCTION_WORDS)).split())

SIMILAR = 0.3  # two shared words of six: "book a meeting room" ~ "reserve a meeting room"
REASONS = ("no_answer", "down_voted", "weak_support")
REASON_LABELS = {
    "no_answer": "no answer",
    "down_voted": "voted down",
    "weak_support": "weak citation support",
}


@dataclass(frozen=True)
class GapQuestion:
    """One question that went badly, as the reviewer may see it."""

    question_id: int
    answer_id: int
    text: str
    asked_at: datetime
    reasons: tuple[str, ...]
    # (document id, title, best score) of documents retrieved under the threshold
    near: tuple[tuple[int, str, float], ...] = ()


@dataclass
class GapGroup:
    terms: Counter[str] = field(default_factory=Counter)
    questions: list[GapQuestion] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The words most of the group's questions share."""
        return " ".join(term for term, _ in self.terms.most_common(3)) or "(no content words)"

    @property
    def reasons(self) -> Counter[str]:
        return Counter(reason for q in self.questions for reason in q.reasons)

    def weeks(self) -> Counter[date]:
        """Questions per week, keyed by the Monday that starts it."""
        return Counter(_monday(q.asked_at) for q in self.questions)

    def examples(self, count: int = 3) -> list[GapQuestion]:
        return sorted(self.questions, key=lambda q: q.asked_at, reverse=True)[:count]

    def nearest(self, count: int = 3) -> list[tuple[int, str, float]]:
        """The documents retrieved most often for the group, under the threshold."""
        seen: Counter[int] = Counter()
        best: dict[int, tuple[int, str, float]] = {}
        for question in self.questions:
            for document_id, title, score in question.near:
                seen[document_id] += 1
                if document_id not in best or score > best[document_id][2]:
                    best[document_id] = (document_id, title, score)
        return [best[document_id] for document_id, _ in seen.most_common(count)]


def _monday(moment: datetime) -> date:
    day = moment.date()
    return day - timedelta(days=day.weekday())


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def gap_groups(questions: Iterable[GapQuestion], *, limit: int = 2000) -> list[GapGroup]:
    """``questions`` grouped by shared words, largest group first (ties: newest first)."""
    newest = sorted(questions, key=lambda q: q.asked_at, reverse=True)[:limit]
    groups: list[tuple[frozenset[str], GapGroup]] = []
    for question in newest:
        stems = question_stems(question.text) - _FUNCTION_STEMS
        for index, (words, group) in enumerate(groups):
            if _similarity(stems, words) >= SIMILAR:
                group.questions.append(question)
                group.terms.update(stems)
                # The group's words: those of most of its questions, so it does not drift.
                half = len(group.questions) / 2
                kept = frozenset(t for t, n in group.terms.items() if n > half) or words
                groups[index] = (kept, group)
                break
        else:
            group = GapGroup(terms=Counter(stems), questions=[question])
            groups.append((stems, group))
    ordered = [group for _, group in groups]
    return sorted(ordered, key=lambda g: -len(g.questions))


def _cell(text: str) -> str:
    """Safe in a spreadsheet: a cell a user's question starts with ``=``, ``+``, ``-``,
    ``@`` (or a tab or CR) would be read as a formula (OWASP's CSV injection advice)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def gap_rows(groups: Sequence[GapGroup]) -> list[list[str]]:
    """The report as rows (CSV and the command): a header, then one row per group; every
    cell is safe to open in a spreadsheet."""
    header = ["group", "questions", *[REASON_LABELS[r] for r in REASONS], "weeks", "examples"]
    rows = [[*header, "nearest documents"]]
    for group in groups:
        reasons = group.reasons
        weeks = "; ".join(f"{week.isoformat()}: {n}" for week, n in sorted(group.weeks().items()))
        row = [
            group.label,
            str(len(group.questions)),
            *[str(reasons.get(reason, 0)) for reason in REASONS],
            weeks,
            " | ".join(q.text for q in group.examples()),
            " | ".join(f"{title} ({score:.2f})" for _, title, score in group.nearest()),
        ]
        rows.append([_cell(cell) for cell in row])
    return rows
