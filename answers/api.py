"""The REST API (django-ninja). Thin: it calls the pipeline, selectors and services."""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, NinjaAPI, Path, Query, Schema, Status
from pydantic import create_model, field_validator

from . import pipeline, presenters, selectors, services, streams
from .auth import api_auth
from .events import ErrorEvent
from .models import Answer
from .types import AnswerPayload, Reference

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="Cited Answers",
    version="1",
    description="Ask questions of your documents; every citation in an answer is true.",
    auth=api_auth,
    urls_namespace="answers-api",
)


# Database integers are 64-bit; larger ids and offsets cannot exist, so refuse them early.
MAX_ID = selectors.MAX_ID
MAX_OFFSET = 10**9


class AskIn(Schema):
    question: str
    conversation_id: uuid.UUID | None = None


def _schema_of(name: str, data: type, **fields: tuple[Any, Any]) -> type[Schema]:
    """The schema of the plain type ``data`` (a dataclass of ``answers.types``): its fields
    in its order, with its types and defaults; ``fields`` gives some another (type,
    default). The body is the type's ``to_dict()``, so the two cannot drift apart."""
    hints = typing.get_type_hints(data)
    spec: dict[str, Any] = {
        field.name: fields.get(
            field.name,
            (hints[field.name], ... if field.default is dataclasses.MISSING else field.default),
        )
        for field in dataclasses.fields(data)
    }
    schema: type[Schema] = create_model(name, __base__=Schema, **spec)
    return schema


ReferenceOut = _schema_of(
    "ReferenceOut",
    Reference,
    anchor=(str, Field("", description="The element id of this entry in the page's Sources panel")),
)
AnswerOut = _schema_of(
    "AnswerOut",
    AnswerPayload,
    references=(list[ReferenceOut], ...),  # type: ignore[valid-type]
)


class AnswerSummaryOut(Schema):
    answer_id: int
    conversation_id: str
    turn: int
    question: str
    status: str
    created_at: datetime


class AnswerPageOut(Schema):
    items: list[AnswerSummaryOut]
    count: int
    limit: int
    offset: int


class FeedbackIn(Schema):
    """Giving feedback again replaces the rating; the comment is kept unless one is sent
    (send `""` to clear it)."""

    rating: Literal["up", "down"]
    comment: str | None = Field(None, max_length=4000)

    @field_validator("comment")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        # PostgreSQL's text refuses NUL: a clear 422 here, not a 500 from the database.
        if value is not None and "\x00" in value:
            raise ValueError("The comment must not contain NUL characters.")
        return value


class FeedbackOut(Schema):
    answer_id: int
    rating: str
    comment: str


class ErrorOut(Schema):
    detail: str
    code: str | None = None
    answer_id: int | None = None


class ConflictOut(ErrorOut):
    """Refused because of where the answer is: which answer, and its status now."""

    answer_id: int
    status: str


class StopOut(Schema):
    answer_id: int
    status: str


class InvalidOut(Schema):
    """A refused body: our own message, or the validator's list of problems."""

    detail: str | list[dict[str, Any]]
    code: str | None = None


# The one table from an error's code to this transport's status: every domain error's
# (pipeline.AskRefused and its kinds, services.AnswerStillStreaming, selectors.NotFound) and
# the few this transport raises itself. Every error response is built by ``_error``.
HTTP_STATUS: dict[str, int] = {
    "invalid": 422,  # as the validator's own refusals
    "invalid_question": 422,
    "forbidden": 403,
    "not_found": 404,
    "too_large": 413,
    "rate_limited": 429,
    "not_streaming": 409,
    "streaming": 409,
    "generation_failed": 502,
    "unavailable": 503,
    "busy": 503,
}


def _error(
    request: HttpRequest,
    *,
    code: str,
    message: str,
    answer: Answer | None = None,
    answer_id: int | None = None,
    retry_after: int | None = None,
) -> HttpResponse:
    body: dict[str, Any] = {"detail": message, "code": code}
    if answer is not None:  # a conflict says which answer, and its state now
        body |= {"answer_id": answer.pk, "status": answer.status}
    elif answer_id is not None:
        body["answer_id"] = answer_id
    response = api.create_response(request, body, status=HTTP_STATUS[code])
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


@api.exception_handler(pipeline.AskRefused)
def _ask_refused(request: HttpRequest, exc: pipeline.AskRefused) -> HttpResponse:
    return _error(
        request, code=exc.code, message=exc.message, answer=exc.answer, retry_after=exc.retry_after
    )


@api.exception_handler(services.AnswerStillStreaming)
def _still_streaming(request: HttpRequest, exc: services.AnswerStillStreaming) -> HttpResponse:
    return _error(request, code=exc.code, message=str(exc), answer=exc.answer)


@api.exception_handler(selectors.NotFound)
@api.exception_handler(streams.AnswerNotFound)
def _not_found(
    request: HttpRequest, exc: selectors.NotFound | streams.AnswerNotFound
) -> HttpResponse:
    # One body for every answer that is missing or not yours, whichever route refuses it.
    return _error(request, code=exc.code, message="Not found.")


# The database cannot be reached (refusing connections, its backends ended, or no pooled
# connection within the pool's timeout): the caller may ask again once it is back.
DATABASE_RETRY_AFTER = 5


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_unavailable(
    request: HttpRequest, exc: OperationalError | InterfaceError
) -> HttpResponse:
    logger.error("The database could not be used: %s", exc)
    return _error(
        request,
        code="unavailable",
        message=pipeline.DATABASE_UNAVAILABLE_MESSAGE,
        retry_after=DATABASE_RETRY_AFTER,
    )


@api.exception_handler(RequestDataTooBig)
def _too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # A body over DATA_UPLOAD_MAX_MEMORY_SIZE: refused as what it is, not a 500.
    return _error(request, code="too_large", message="The request body is too large.")


@api.post(
    "/answers",
    response={
        200: AnswerOut,
        403: ErrorOut,
        404: ErrorOut,
        422: InvalidOut,
        429: ErrorOut,
        502: ErrorOut,
        503: ErrorOut,
    },
    summary="Ask a question",
)
async def create_answer(request: HttpRequest, payload: AskIn) -> Any:
    """Answer a question from the documents the caller may view.

    `references` is the final Sources list: only what the text cites, numbered in
    first-citation order (every source, unnumbered in the text, if it cites nothing).

    With `Accept: text/event-stream` the answer streams as server-sent events:
    `references` (every retrieved source, prompt numbering), `token` (`text`),
    `citation` (`number`, `document_id`, the first time a source is cited), then one
    `done` (this operation's JSON body plus `number_map`) or one `error` (`message`, `code`).
    Every event's data also carries its `type` (answers/events.py is the vocabulary).
    Each event's `id` is its sequence number in the answer's stream. Refusals (401, 403,
    404, 422, and 503 when the channel layer is unreachable or the server is restarting,
    with `Retry-After`) come as JSON before any
    event. The answer is generated to the end even if the client goes away:
    `GET /answers/{answer_id}/events` resumes it, and `POST /answers/{answer_id}/stop`
    stops it.
    """
    if "text/event-stream" in request.headers.get("Accept", ""):
        asked = await streams.answer_stream_begin(
            user=request.auth,  # type: ignore[attr-defined]
            question=payload.question,
            conversation_id=payload.conversation_id,
        )
        return _event_stream(asked.events, answer_id=asked.answer_id)
    last = await streams.answer_stream_complete(
        user=request.auth,  # type: ignore[attr-defined]
        question=payload.question,
        conversation_id=payload.conversation_id,
    )
    if isinstance(last, pipeline.ErrorEvent):
        return _error(
            request, code="generation_failed", message=last.message, answer_id=last.answer_id
        )
    return last.answer.to_dict()


def _event_stream(
    events: AsyncGenerator[streams.StreamEvent, None], *, answer_id: int
) -> StreamingHttpResponse:
    response = StreamingHttpResponse(
        _server_sent_events(events, answer_id=answer_id), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-store, no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx and friends: do not buffer the stream
    return response


async def _server_sent_events(
    events: AsyncGenerator[streams.StreamEvent, None], *, answer_id: int
) -> AsyncIterator[str]:
    try:
        async with aclosing(events):
            async for event in events:
                yield _server_sent_event(event)
    except pipeline.AskRefused as exc:
        # Refused once the stream has begun (Redis gone, the answer deleted): too late for
        # a status, so the stream's last word, as the socket sends it. An exception here
        # would leave the client's connection open with nothing more to come.
        error = ErrorEvent(exc.message, answer_id=answer_id, code=exc.code)
        yield _server_sent_event(streams.StreamEvent(seq=None, event=error))
    except Exception:
        logger.exception("Streaming answer %s failed", answer_id)
        error = ErrorEvent(pipeline.GENERIC_ERROR, answer_id=answer_id, code="failed")
        yield _server_sent_event(streams.StreamEvent(seq=None, event=error))


def _server_sent_event(event: streams.StreamEvent) -> str:
    data = json.dumps(event.event.to_dict(), separators=(",", ":"))
    # The stored result of a finished answer has no place in the stream: no id.
    event_id = f"id: {event.seq}\n" if event.seq is not None else ""
    return f"{event_id}event: {event.event.type}\ndata: {data}\n\n"


@api.get(
    "/answers/{answer_id}/events",
    response={200: None, 404: ErrorOut, 422: InvalidOut, 503: ErrorOut},
    summary="Follow an answer's stream",
)
async def follow_answer(
    request: HttpRequest,
    answer_id: int = Path(..., ge=1, le=MAX_ID),
    after: int | None = Query(None, ge=0, le=MAX_ID),
) -> Any:
    """Server-sent events of one of your answers, as `POST /answers` streams them: those
    after sequence number `after` or the `Last-Event-ID` header an EventSource sends when
    it reconnects, whichever is later (from the start without either), live until its
    `done` or `error`. For an answer that finished long ago, its stored result as one
    `done` event without an id. Refused as JSON before any event (404; 503 while the
    channel layer is unreachable); a stream that cannot go on (Redis gone mid-stream) ends
    with an `error` event without an id (code `unavailable`): resume from the last id.
    """
    header = request.headers.get("Last-Event-ID", "").strip()
    if header and not (header.isascii() and header.isdigit() and len(header) < 19):
        return _error(request, code="invalid", message="Last-Event-ID must be a sequence number.")
    # An EventSource opened on `?after=N` reconnects to that same URL with the header: the
    # later of the two is what the client has, or every reconnect would repeat N+1...
    after = max(after or 0, int(header) if header else 0)
    user = request.auth  # type: ignore[attr-defined]
    # Refused as JSON before the stream starts (not yours: 404; Redis unreachable: 503).
    events = await streams.answer_stream_open(answer_id=answer_id, user=user, after=after)
    return _event_stream(events, answer_id=answer_id)


@api.post(
    "/answers/{answer_id}/stop",
    response={202: StopOut, 404: ErrorOut, 409: ConflictOut, 422: InvalidOut, 503: ErrorOut},
    summary="Stop an answer being generated",
)
async def stop_answer(request: HttpRequest, answer_id: int = Path(..., ge=1, le=MAX_ID)) -> Any:
    """Stop one of your answers wherever it is being generated; what was written so far is
    kept (status `interrupted`), and its stream ends with that `done`. 503 when the stop
    cannot reach the process generating it (the channel layer unreachable)."""
    user = request.auth  # type: ignore[attr-defined]
    await streams.answer_stream_stop(answer_id=answer_id, user=user)
    return Status(202, {"answer_id": answer_id, "status": "stopping"})


@api.get("/answers", response={200: AnswerPageOut, 422: InvalidOut}, summary="List your answers")
def list_answers(
    request: HttpRequest,
    limit: int = Query(20, ge=1, le=100),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
) -> Any:
    answers = selectors.answer_list_for_user(user=request.auth)  # type: ignore[attr-defined]
    page = list(answers[offset : offset + limit])
    return {
        "items": [
            {
                "answer_id": a.pk,
                "conversation_id": str(a.question.conversation_id),
                "turn": a.question.turn,
                "question": a.question.text,
                "status": a.status,
                "created_at": a.created_at,
            }
            for a in page
        ],
        "count": answers.count(),
        "limit": limit,
        "offset": offset,
    }


@api.get(
    "/answers/{answer_id}",
    response={200: AnswerOut, 404: ErrorOut, 422: InvalidOut},
    summary="One answer",
)
def get_answer(request: HttpRequest, answer_id: int = Path(..., ge=1, le=MAX_ID)) -> Any:
    user = request.auth  # type: ignore[attr-defined]
    answer = selectors.answer_get_for_user(answer_id=answer_id, user=user)
    return presenters.answer_payload(answer=answer, user=user).to_dict()


@api.post(
    "/answers/{answer_id}/feedback",
    response={200: FeedbackOut, 404: ErrorOut, 409: ConflictOut, 422: InvalidOut},
    summary="Rate an answer",
)
def give_feedback(
    request: HttpRequest, payload: FeedbackIn, answer_id: int = Path(..., ge=1, le=MAX_ID)
) -> Any:
    user = request.auth  # type: ignore[attr-defined]
    answer = selectors.answer_get_for_user(answer_id=answer_id, user=user)
    feedback = services.feedback_record(
        answer=answer, user=user, rating=payload.rating, comment=payload.comment
    )
    return {"answer_id": answer.pk, "rating": feedback.rating, "comment": feedback.comment}
