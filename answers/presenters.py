"""Output built in one place: the ``Reference`` and ``AnswerPayload`` every transport (JSON,
SSE, WebSocket, pages) sends, from what selectors read and what the pipeline numbered.
Selectors only query; nothing here writes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.urls import reverse

from . import selectors
from .conf import answers_settings
from .models import Answer, RetrievedSource
from .rendering import (
    render_answer_html,
    render_passage_html,
    safe_url,
    source_anchor,
    visible_text,
)
from .selectors import AnyUser
from .types import AnswerPayload, NumberedSource, Reference


def answer_anchor_prefix(*, answer_id: int) -> str:
    return f"answer-{answer_id}-source"


# Heading underlines and rules (reST, Markdown) are layout, not content.
_RULE_LINE = re.compile(r"(?m)^\s*([*=\-~^#+_])\1{2,}\s*$")


def excerpt_of(texts: Iterable[str]) -> str:
    """The passages a source was retrieved for, as Markdown: line breaks kept (a code block
    or a list stays one), layout rules and blank runs dropped, cut at ``EXCERPT_CHARS``."""
    limit = int(answers_settings.EXCERPT_CHARS)
    parts = []
    for text in texts:
        lines = [line.rstrip() for line in _RULE_LINE.sub("", text).strip().splitlines()]
        parts.append(_BLANK_RUN.sub("\n\n", "\n".join(lines)))
    excerpt = "\n\n…\n\n".join(part for part in parts if part)
    if len(excerpt) > limit:
        cut = excerpt[:limit]
        excerpt = (cut.rsplit(None, 1)[0] if " " in cut or "\n" in cut else cut) + " …"
    return excerpt


_BLANK_RUN = re.compile(r"\n{3,}")
SNIPPET_CHARS = 160


def snippet_of(excerpt: str) -> str:
    """The first words of an excerpt's prose on one line: a source card's summary and a
    citation's preview (plain text; the full excerpt is rendered beside it)."""
    # Headings are the title again, mostly; code and tables are left to the full passage.
    flat = visible_text(excerpt, headings=False) or " ".join(excerpt.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    return flat[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " …"


# Excerpts rendered lately. Keyed by the excerpt's whole text, nothing else: the rendering
# is a function of that text alone, so a hit is exactly what rendering it again would give,
# a changed passage (a document re-ingested) is a new key, and only a caller that already
# holds the text can reach its entry (ADR 0035). Excerpts are at most EXCERPT_CHARS long.
EXCERPT_CACHE_SIZE = 2048


@dataclass(frozen=True)
class ExcerptView:
    """What a Sources card shows of an excerpt: its first words (plain text) and the whole
    excerpt as sanitized HTML."""

    snippet: str
    html: str


@lru_cache(maxsize=EXCERPT_CACHE_SIZE)
def excerpt_view(excerpt: str) -> ExcerptView:
    """``excerpt``'s snippet and HTML, rendered once while it is shown often (every panel of
    every answer citing the same passage)."""
    return ExcerptView(snippet=snippet_of(excerpt), html=render_passage_html(excerpt))


def location_of(url: str) -> str:
    """Where a source is, in words: the site its link goes to, or this corpus. Read from
    the URL as a browser reads it (``safe_url``), as the link itself is."""
    followed = safe_url(url)
    if followed and followed.startswith(("http://", "https://")):
        return urlsplit(followed).hostname or followed
    return "In the corpus"


def reference_url(*, document_id: int, url: str, ordinal: int | None) -> str:
    """The document's own URL when it is safe to follow, else its page on this site."""
    external = safe_url(url)
    if external:
        return external
    path = reverse("answers:document", kwargs={"document_id": document_id})
    return f"{path}#chunk-{ordinal}" if ordinal is not None else path


def answer_references(
    *, answer: Answer, user: AnyUser, every_source: bool = False
) -> list[Reference]:
    """The stored final Sources list, re-checking each document's access for ``user``, each
    with the evidence the answer was written from and its status now (ADR 0022).
    ``every_source``: shown whatever its access (an auditor's review, below)."""
    return _answers_references(answers=[answer], user=user, every_source=every_source)[answer.pk]


def _answers_references(
    *, answers: Sequence[Answer], user: AnyUser, every_source: bool = False
) -> dict[int, list[Reference]]:
    """``answer_references`` of each of ``answers`` by answer id, in three queries however
    many there are."""
    rows_of = selectors.answers_final_sources(answers=answers)
    every_row = [row for rows in rows_of.values() for row in rows]
    ids = {row.document_id for row in every_row if row.document_id}
    visible = ids if every_source else selectors.document_visible_ids(user=user, document_ids=ids)
    current = selectors.passages_still_current(rows=every_row)
    return {
        answer.pk: _references(
            answer=answer,
            rows=rows_of.get(answer.question_id, []),
            visible=visible,
            current=current,
            every_source=every_source,
        )
        for answer in answers
    }


def _references(
    *,
    answer: Answer,
    rows: list[RetrievedSource],
    visible: set[int],
    current: set[tuple[int, str]],
    every_source: bool,
) -> list[Reference]:
    prefix = answer_anchor_prefix(answer_id=answer.pk)
    grouped: dict[int, list[RetrievedSource]] = {}
    for row in rows:
        grouped.setdefault(row.final_number or 0, []).append(row)
    references = []
    for number, members in grouped.items():
        first = members[0]
        anchor = source_anchor(prefix, number)
        document = first.document
        # Removed: shown from its snapshot only if everyone could view it then.
        shown = every_source or (
            first.document_public if document is None else first.document_id in visible
        )
        if not shown:
            # Keep the number so the text's markers still line up, but show nothing of it.
            references.append(
                Reference(
                    number,
                    first.document_id or 0,
                    "Source no longer available",
                    "",
                    0.0,
                    "",
                    anchor,
                    available=False,
                )
            )
            continue
        members.sort(key=_document_order)
        if document is None:
            status, url = "removed", ""
        else:
            changed = any(not _passage_current(m, current) for m in members)
            status = "changed" if changed else "current"
            ordinals = [m.chunk.ordinal for m in members if m.chunk]
            url = reference_url(
                document_id=document.pk,
                url=document.url,
                # A changed passage's old position means nothing in the new version.
                ordinal=ordinals[0] if ordinals and not changed else None,
            )
        references.append(
            Reference(
                index=number,
                document_id=first.document_id or 0,
                title=_title_of(first),
                url=url,
                score=max(m.score for m in members),
                excerpt=excerpt_of(text for m in members if (text := passage_text(m))),
                anchor=anchor,
                source_status=status,
            )
        )
    return references


def answer_references_for_review(*, answer: Answer, reviewer: AnyUser) -> list[Reference]:
    """The final Sources list as the admin shows ``reviewer`` an answer: as the candidates
    table beside it does (``selectors.retrieved_sources_for_review``), every source for
    one who may review every answer (``review_all_answers``), else those they may view."""
    return answer_references(
        answer=answer,
        user=reviewer,
        every_source=selectors.user_may_review_all(user=reviewer),
    )


def _document_order(row: RetrievedSource) -> tuple[int, int]:
    """Passages in the order the document had them (the snapshot's position, else the
    live chunk's; search rank breaks ties and stands in when neither is known)."""
    if row.chunk_ordinal is not None:
        return (row.chunk_ordinal, row.rank)
    return (row.chunk.ordinal if row.chunk is not None else row.rank, row.rank)


def passage_text(row: RetrievedSource) -> str:
    """The passage as the answer was written from it; answers older than snapshots
    (migration 0009) have only the live chunk, while it exists."""
    if row.passage is not None:
        return row.passage.text
    return row.chunk.text if row.chunk is not None else ""


def _passage_current(row: RetrievedSource, current: set[tuple[int, str]]) -> bool:
    if row.passage is None:
        return row.chunk is not None  # no snapshot: current while its chunk lives
    return (row.document_id, row.passage.text) in current


def _title_of(row: RetrievedSource) -> str:
    if row.document is not None:
        return row.document.title
    return row.document_title or "Removed document"


def answer_payload(*, answer: Answer, user: AnyUser) -> AnswerPayload:
    """A stored answer as ``user`` may see it now: withheld (a notice instead of its text)
    when it was written from a source they can no longer view."""
    return answer_payloads(answers=[answer], user=user)[0]


def answer_payloads(*, answers: Iterable[Answer], user: AnyUser) -> list[AnswerPayload]:
    """``answer_payload`` of each of ``answers``, in order, in a fixed number of queries
    (a conversation's page: they were four a turn)."""
    listed = list(answers)
    references = _answers_references(answers=listed, user=user)
    withheld = selectors.answers_withheld_ids(answers=listed, user=user)
    return [
        _payload(answer=answer, references=references[answer.pk], withheld=answer.pk in withheld)
        for answer in listed
    ]


def _payload(*, answer: Answer, references: list[Reference], withheld: bool) -> AnswerPayload:
    if withheld:
        text = selectors.WITHHELD_MESSAGE
    elif answer.status == Answer.Status.STREAMING:
        text = answer.raw_text
    else:
        text = answer.final_text
    return AnswerPayload(
        answer_id=answer.pk,
        conversation_id=str(answer.question.conversation_id),
        turn=answer.question.turn,
        status=answer.status,
        text=text,
        html=render_answer_html(
            text,
            anchor_prefix=answer_anchor_prefix(answer_id=answer.pk),
            source_count=len(references),
        ),
        references=tuple(references),
        withheld=withheld,
    )


def reference_from_source(*, source: NumberedSource, anchor_prefix: str, index: int) -> Reference:
    """A numbered source of a live answer as clients see it (``index``: its number now)."""
    ordered = sorted(source.candidates, key=lambda c: c.ordinal)
    return Reference(
        index=index,
        document_id=source.document_id,
        title=source.title,
        url=reference_url(
            document_id=source.document_id, url=source.url, ordinal=ordered[0].ordinal
        ),
        score=source.score,
        excerpt=excerpt_of(c.text for c in ordered),
        anchor=source_anchor(anchor_prefix, index),
    )
