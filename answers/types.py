"""Plain data passed between retrieval, the pipeline and the transports."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from .prompt import PromptSource


class PlainData:
    """``to_dict`` and ``from_dict`` of a dataclass of plain fields, derived from its fields.

    ``to_dict`` writes the fields in their order (a nested ``PlainData`` as its dict, a
    tuple as a list); ``from_dict`` reads each as its declared type (``int``, ``str``,
    ``float``, ``bool``, ``X | None``, ``tuple[X, ...]``, another ``PlainData``), ignores
    other keys, and gives a missing field its default (``KeyError`` if it has none). The
    field types are read at run time (``typing.get_type_hints``), so the names they use
    must be imported at run time in the class's module, not only when type checking."""

    def to_dict(self) -> dict[str, Any]:
        return {name: _plain(getattr(self, name)) for name, _, _ in _fields(type(self))}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        values = {}
        for name, kind, required in _fields(cls):
            if name in data:
                values[name] = _read(kind, data[name])
            elif required:
                raise KeyError(name)
        return cls(**values)


_FIELDS: dict[type, tuple[tuple[str, Any, bool], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each field of the dataclass ``cls`` (worked out once)."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _FIELDS[cls] = tuple(
            (field.name, hints[field.name], _required(field)) for field in dataclasses.fields(cls)
        )
    return found


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _plain(value: Any) -> Any:
    if isinstance(value, PlainData):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _read(kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        (kind,) = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        return _read(kind, value)
    if origin is tuple:
        (item, _) = typing.get_args(kind)  # tuple[X, ...]
        return tuple(_read(item, element) for element in value)
    if isinstance(kind, type) and issubclass(kind, PlainData):
        return kind.from_dict(value)
    return kind(value)


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
    document_public: bool = False  # everyone who may ask may view it (as retrieval read it)
    # The asker may view it, read with the chunk (``candidates_for_hits``); None: not read.
    document_visible: bool | None = None
    document_signature: bytes = b""  # answers.duplicates' MinHash of the document's body
    rank_score: float | None = None  # answers.ranking's order; never shown or thresholded
    rerank_score: float | None = None
    prompt_number: int | None = None
    dropped_reason: str = ""


@dataclass(frozen=True)
class Reference(PlainData):
    """A numbered source as clients see it."""

    index: int
    document_id: int
    title: str
    url: str
    score: float
    excerpt: str
    anchor: str = ""
    available: bool = True
    # A stored answer's evidence against its documents now (ADR 0022): "current" (every
    # cited passage still reads the same), "changed" (the excerpt is the passage as it
    # was; ``url`` is the current version) or "removed" (the document is gone).
    source_status: str = "current"

    def __post_init__(self) -> None:
        # Kept as shown (four places), so that a reference read back from a stream log or
        # a message equals the one written.
        object.__setattr__(self, "score", round(float(self.score), 4))

    @property
    def links_outside(self) -> bool:
        """The title links to the document's own (http) URL rather than its page here, so
        the Sources panel also links the copy in the corpus."""
        # ``url`` is ``safe_url``'s reading (presenters.reference_url): scheme lower-cased.
        return self.url.startswith(("http://", "https://"))


@dataclass(frozen=True)
class AnswerPayload(PlainData):
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
