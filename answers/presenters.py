"""Output built in one place: the ``Reference`` and ``AnswerPayload`` every transport (JSON,
SSE, WebSocket, pages) sends, from what selectors read and what the pipeline numbered.
Selectors only query; nothing here writes."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.urls import reverse

from . import selectors
from .conf import answers_settings
from .models import Answer, RetrievedSource
from .rendering import render_answer_html, safe_url, source_anchor
from .selectors import AnyUser
from .types import AnswerPayload, NumberedSource, Reference


def answer_anchor_prefix(*, answer_id: int) -> str:
    return f"answer-{answer_id}-source"


# Heading underlines and rules (reST, Markdown) are layout, not content.
_RULE_LINE = re.compile(r"(?m)^\s*([*=\-~^#+_])\1{2,}\s*$")


def excerpt_of(texts: Iterable[str]) -> str:
    limit = int(answers_settings.EXCERPT_CHARS)
    excerpt = " … ".join(" ".join(_RULE_LINE.sub("", text).split()) for text in texts)
    if len(excerpt) > limit:
        excerpt = excerpt[:limit].rsplit(" ", 1)[0] + " …"
    return excerpt


def reference_url(*, document_id: int, url: str, ordinal: int | None) -> str:
    """The document's own URL when it is safe to follow, else its page on this site."""
    external = safe_url(url)
    if external:
        return external
    path = reverse("answers:document", kwargs={"document_id": document_id})
    return f"{path}#chunk-{ordinal}" if ordinal is not None else path


def answer_references(*, answer: Answer, user: AnyUser) -> list[Reference]:
    """The stored final Sources list, re-checking each document's access for ``user``."""
    rows = selectors.answer_final_sources(answer=answer)
    visible = selectors.document_visible_ids(
        user=user, document_ids={row.document_id for row in rows}
    )
    prefix = answer_anchor_prefix(answer_id=answer.pk)
    grouped: dict[int, list[RetrievedSource]] = {}
    for row in rows:
        grouped.setdefault(row.final_number or 0, []).append(row)
    references = []
    for number, members in grouped.items():
        first = members[0]
        anchor = source_anchor(prefix, number)
        if first.document_id not in visible:
            # Keep the number so the text's markers still line up, but show nothing of it.
            references.append(
                Reference(
                    number,
                    first.document_id,
                    "Source no longer available",
                    "",
                    0.0,
                    "",
                    anchor,
                    available=False,
                )
            )
            continue
        chunks = sorted((m.chunk for m in members if m.chunk), key=lambda c: c.ordinal)
        references.append(
            Reference(
                index=number,
                document_id=first.document_id,
                title=first.document.title,
                url=reference_url(
                    document_id=first.document_id,
                    url=first.document.url,
                    ordinal=chunks[0].ordinal if chunks else None,
                ),
                score=max(m.score for m in members),
                excerpt=excerpt_of(c.text for c in chunks),
                anchor=anchor,
            )
        )
    return references


def answer_payload(*, answer: Answer, user: AnyUser) -> AnswerPayload:
    """A stored answer as ``user`` may see it now: withheld (a notice instead of its text)
    when it was written from a source they can no longer view."""
    references = answer_references(answer=answer, user=user)
    withheld = selectors.answer_is_withheld(answer=answer, user=user)
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
