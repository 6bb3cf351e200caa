"""Plain data passed between retrieval, the pipeline and the transports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Candidate:
    """A retrieved chunk on its way through scoring, reranking, caps and access."""

    chunk_id: int
    document_id: int
    ordinal: int
    title: str
    url: str
    text: str
    rank: int
    score: float
    rerank_score: float | None = None
    prompt_number: int | None = None
    dropped_reason: str = ""


@dataclass(frozen=True)
class Reference:
    """A numbered source as clients see it."""

    index: int
    document_id: int
    title: str
    url: str
    score: float
    excerpt: str
    anchor: str = ""
    available: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "document_id": self.document_id,
            "title": self.title,
            "url": self.url,
            "score": round(self.score, 4),
            "excerpt": self.excerpt,
            "available": self.available,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, anchor: str) -> Reference:
        """Back from ``as_dict()`` (a stream event read from the log)."""
        return cls(
            index=int(data["index"]),
            document_id=int(data["document_id"]),
            title=str(data["title"]),
            url=str(data["url"]),
            score=float(data["score"]),
            excerpt=str(data["excerpt"]),
            anchor=anchor,
            available=bool(data.get("available", True)),
        )


@dataclass(frozen=True)
class AnswerPayload:
    """The body of a JSON answer and of the stream's ``done`` event."""

    answer_id: int
    conversation_id: str
    turn: int
    status: str
    text: str
    html: str
    references: list[Reference] = field(default_factory=list)
    # The viewer may no longer read a source it was written from: ``text``/``html`` are a
    # notice (selectors.answer_payload).
    withheld: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "answer_id": self.answer_id,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "status": self.status,
            "text": self.text,
            "html": self.html,
            "references": [reference.as_dict() for reference in self.references],
            "withheld": self.withheld,
        }
