"""Plain data passed between retrieval, the pipeline and the transports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .prompt import PromptSource


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
    document_chunks: int = 1  # the document's chunks in all (answers.ranking's breadth)
    rank_score: float | None = None  # answers.ranking's order; never shown or thresholded
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

    def __post_init__(self) -> None:
        # Kept as shown (four places), so that a reference read back from a stream log or
        # a message equals the one written.
        object.__setattr__(self, "score", round(float(self.score), 4))

    @property
    def links_outside(self) -> bool:
        """The title links to the document's own (http) URL rather than its page here, so
        the Sources panel also links the copy in the corpus."""
        return self.url.startswith(("http://", "https://"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "document_id": self.document_id,
            "title": self.title,
            "url": self.url,
            "score": self.score,
            "excerpt": self.excerpt,
            "anchor": self.anchor,
            "available": self.available,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reference:
        """Back from ``to_dict()`` (a stream event read from the log or a message)."""
        return cls(
            index=int(data["index"]),
            document_id=int(data["document_id"]),
            title=str(data["title"]),
            url=str(data["url"]),
            score=float(data["score"]),
            excerpt=str(data["excerpt"]),
            anchor=str(data.get("anchor", "")),
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
    references: tuple[Reference, ...] = ()
    # The viewer may no longer read a source it was written from: ``text``/``html`` are a
    # notice (presenters.answer_payload).
    withheld: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "references", tuple(self.references))

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer_id": self.answer_id,
            "conversation_id": self.conversation_id,
            "turn": self.turn,
            "status": self.status,
            "text": self.text,
            "html": self.html,
            "references": [reference.to_dict() for reference in self.references],
            "withheld": self.withheld,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnswerPayload:
        return cls(
            answer_id=int(data["answer_id"]),
            conversation_id=str(data["conversation_id"]),
            turn=int(data["turn"]),
            status=str(data["status"]),
            text=str(data["text"]),
            html=str(data["html"]),
            references=tuple(Reference.from_dict(item) for item in data["references"]),
            withheld=bool(data.get("withheld", False)),
        )


@dataclass(frozen=True)
class NumberedSource:
    number: int
    document_id: int
    title: str
    url: str
    candidates: tuple[Candidate, ...]

    @property
    def score(self) -> float:
        return max(candidate.score for candidate in self.candidates)

    def as_prompt_source(self) -> PromptSource:
        ordered = sorted(self.candidates, key=lambda c: c.ordinal)
        return PromptSource(
            number=self.number,
            document_id=self.document_id,
            title=self.title,
            passages=tuple(candidate.text for candidate in ordered),
        )


@dataclass(frozen=True)
class SourceSelection:
    """What ``retrieval.select_sources`` decided: the numbered sources, and why the
    reranker's order was not used when it failed (empty otherwise; shown in the admin)."""

    sources: list[NumberedSource]
    rerank_error: str = ""


@dataclass(frozen=True)
class Retrieval:
    """One question's retrieval as the pipeline stores it (``pipeline.retrieve_sources``)."""

    candidates: list[Candidate]
    sources: list[NumberedSource]
    rerank_error: str = ""
    # The standalone question searched for when a follow-up was rewritten (empty: none).
    search_text: str = ""
