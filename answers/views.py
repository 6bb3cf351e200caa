"""Server-rendered pages. Thin: selectors read, templates render."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from . import presenters, selectors
from .conf import answers_settings
from .types import AnswerPayload


def _ask_page(
    request: HttpRequest, *, conversation_id: uuid.UUID | None, turns: list[Turn]
) -> HttpResponse:
    if not selectors.user_can_ask(user=request.user):
        raise PermissionDenied("You do not have permission to ask questions.")
    context = {
        "max_question_length": int(answers_settings.MAX_QUESTION_LENGTH),
        "conversation_id": conversation_id,
        "turns": turns,
    }
    return render(request, "answers/ask.html", context)


@login_required
def ask(request: HttpRequest) -> HttpResponse:
    return _ask_page(request, conversation_id=None, turns=[])


@dataclass(frozen=True)
class Turn:
    question: str
    answer: AnswerPayload


@login_required
def conversation_detail(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """A past conversation, every turn rendered from the store (each answer's sources
    re-checked for this viewer), with the form asking the next turn of it."""
    try:
        conversation = selectors.conversation_get_for_user(
            conversation_id=conversation_id, user=request.user
        )
    except selectors.NotFound:
        raise Http404("No such conversation.") from None
    answers = list(selectors.conversation_answers_for_user(conversation=conversation))
    payloads = presenters.answer_payloads(answers=answers, user=request.user)
    turns = [
        Turn(question=answer.question.text, answer=payload)
        for answer, payload in zip(answers, payloads, strict=True)
    ]
    return _ask_page(request, conversation_id=conversation.pk, turns=turns)


@login_required
def answer_list(request: HttpRequest) -> HttpResponse:
    """The history: conversations, latest first; opening one continues it."""
    paginator = Paginator(selectors.conversation_list_for_user(user=request.user), 25)
    page = paginator.get_page(request.GET.get("page"))
    return render(request, "answers/answer_list.html", {"page_obj": page})


@login_required
def answer_detail(request: HttpRequest, answer_id: int) -> HttpResponse:
    try:
        answer = selectors.answer_get_for_user(answer_id=answer_id, user=request.user)
    except selectors.NotFound:
        raise Http404("No such answer.") from None
    # Rendered from the store, with each source's access re-checked for this viewer.
    payload = presenters.answer_payload(answer=answer, user=request.user)
    return render(
        request,
        "answers/answer_detail.html",
        {"answer": payload, "question": answer.question.text},
    )


@login_required
def document_detail(request: HttpRequest, document_id: int) -> HttpResponse:
    try:
        document = selectors.document_get_visible(user=request.user, document_id=document_id)
    except selectors.NotFound:
        raise Http404("No such document.") from None
    chunks = list(document.chunks.order_by("ordinal"))
    return render(request, "answers/document.html", {"document": document, "chunks": chunks})
