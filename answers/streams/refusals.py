"""What asking for, following or stopping a stream may be refused with (each transport maps
the ``code`` to its own status or event: api.HTTP_STATUS), and the owner check."""

from __future__ import annotations

from typing import Any

from .. import pipeline, selectors
from ..models import Answer

ABANDONED_MESSAGE = "The answer was interrupted before it finished. Please ask again."
DRAINING_MESSAGE = "This server is restarting. Please ask again in a moment."
DRAINING_RETRY_AFTER = 2
BUSY_MESSAGE = "This server is answering as many questions as it can. Please ask again shortly."
BUSY_RETRY_AFTER = 2
UNAVAILABLE_MESSAGE = "Answers cannot be streamed right now. Please try again shortly."


class AnswerNotFound(pipeline.AskRefused):
    """No such answer, or not the caller's: the same message either way."""

    code = "not_found"


class AnswerNotStreaming(pipeline.AskRefused):
    """Stop asked of an answer that is no longer being generated."""

    code = "not_streaming"

    def __init__(self, message: str, *, answer: Answer) -> None:
        super().__init__(message)
        self.answer = answer


class StreamUnavailable(pipeline.AskRefused):
    """The channel layer (Redis) cannot be reached: the answer cannot be streamed."""

    code = "unavailable"


class ServerDraining(StreamUnavailable):
    """This process is shutting down: asked again, another one (or this one restarted)
    will answer. Refused before anything is stored."""


class ServerBusy(pipeline.AskRefused):
    """This process generates as many answers as it may (``MAX_PROCESS_STREAMS``): asked
    again in a moment, or on another process, it will answer. Refused before anything is
    stored."""

    code = "busy"


def answer_for_follower(answer_id: int, user: Any) -> Answer:
    try:
        return selectors.answer_get_for_user(answer_id=answer_id, user=user)
    except selectors.NotFound:
        raise AnswerNotFound("answer not found") from None
