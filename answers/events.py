"""The one event vocabulary of an answer's stream, from the pipeline to every transport.

The pipeline yields these events; the stream log, the channel layer, the SSE view, the
WebSocket consumer and the Sources panel all pass them on as they are. Each event is
written as a plain dict (``to_dict``, keyed on ``type``: JSON, msgpack and pickle can all
carry it) only at the edge where it leaves the process, and read back with
``event_from_dict``, which gives the same event (a property test holds every field to
that). ``StreamEvent`` is the envelope a stream numbers them in: ``(seq, event)``.

No Django imports: the vocabulary is plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .types import AnswerPayload, PlainData, Reference


class EventFormatError(ValueError):
    """A dict that is not an event of this vocabulary (unknown type, missing field)."""


class _PlainEvent(PlainData):
    """An event of plain fields: its dict is its fields after its ``type``."""

    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **super().to_dict()}


@dataclass(frozen=True)
class ReferencesEvent(_PlainEvent):
    """Every source the answer is written from, in prompt numbering (the first event)."""

    answer_id: int
    conversation_id: str
    turn: int
    references: tuple[Reference, ...]
    type: ClassVar[str] = "references"

    def __post_init__(self) -> None:
        object.__setattr__(self, "references", tuple(self.references))


@dataclass(frozen=True)
class TokenEvent(_PlainEvent):
    """Text to append to the answer as it is being written (already stripped)."""

    text: str
    type: ClassVar[str] = "token"


@dataclass(frozen=True)
class CitationEvent(_PlainEvent):
    """The streamed text cites source ``number`` (prompt numbering) for the first time."""

    number: int
    document_id: int
    type: ClassVar[str] = "citation"


@dataclass(frozen=True)
class DoneEvent:
    """The answer as stored: final text, HTML and Sources; ``number_map`` takes each prompt
    number the stream showed to its final number."""

    answer: AnswerPayload
    number_map: Mapping[int, int] = field(default_factory=dict)
    type: ClassVar[str] = "done"

    def __post_init__(self) -> None:
        object.__setattr__(self, "number_map", dict(self.number_map))

    def to_dict(self) -> dict[str, Any]:
        body = {"type": self.type, **self.answer.to_dict()}
        # JSON object keys are strings.
        body["number_map"] = {str(k): v for k, v in self.number_map.items()}
        return body

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DoneEvent:
        return cls(
            answer=AnswerPayload.from_dict(data),
            number_map={int(k): int(v) for k, v in data.get("number_map", {}).items()},
        )


@dataclass(frozen=True)
class ErrorEvent(_PlainEvent):
    """The answer could not be given (or a transport refused a message): ``message`` is
    for the reader; ``code`` for programs."""

    message: str
    code: str | None = None
    answer_id: int | None = None
    type: ClassVar[str] = "error"


Event = ReferencesEvent | TokenEvent | CitationEvent | DoneEvent | ErrorEvent
EVENT_TYPES: dict[str, type[Event]] = {
    kind.type: kind for kind in (ReferencesEvent, TokenEvent, CitationEvent, DoneEvent, ErrorEvent)
}
TERMINAL_EVENTS = (DoneEvent, ErrorEvent)


def event_from_dict(data: Mapping[str, Any]) -> Event:
    """The event ``to_dict`` wrote; ``EventFormatError`` for anything else."""
    kind = EVENT_TYPES.get(str(data.get("type")))
    if kind is None:
        raise EventFormatError(f"unknown event type {data.get('type')!r}")
    try:
        return kind.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise EventFormatError(f"malformed {kind.type} event: {exc!r}") from None


@dataclass(frozen=True)
class StreamEvent:
    """One numbered event of an answer's stream, as every transport sends it.

    ``seq`` is None only for a finished answer's stored result, delivered when its log
    has expired (or when the answer is withheld from the follower)."""

    seq: int | None
    event: Event

    @property
    def terminal(self) -> bool:
        return isinstance(self.event, TERMINAL_EVENTS)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, **self.event.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamEvent:
        seq = data.get("seq")
        return cls(seq=None if seq is None else int(seq), event=event_from_dict(data))
