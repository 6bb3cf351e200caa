"""The event vocabulary (answers/events.py): every event of every type comes back from its
dict, and from that dict sent as JSON (the SSE and WebSocket wire) or msgpack (Redis)."""

from __future__ import annotations

import json

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from answers.events import (
    EVENT_TYPES,
    CitationEvent,
    DoneEvent,
    ErrorEvent,
    EventFormatError,
    ReferencesEvent,
    StreamEvent,
    TokenEvent,
    event_from_dict,
)
from answers.types import AnswerPayload, Reference

ids = st.integers(min_value=1, max_value=2**63 - 1)
text = st.text()
scores = st.floats(min_value=0, max_value=1, allow_nan=False)
references = st.builds(
    Reference,
    index=st.integers(min_value=1, max_value=999),
    document_id=ids,
    title=text,
    url=text,
    score=scores,
    excerpt=text,
    anchor=text,
    available=st.booleans(),
    source_status=st.sampled_from(["current", "changed", "removed"]),
)
payloads = st.builds(
    AnswerPayload,
    answer_id=ids,
    conversation_id=text,
    turn=st.integers(min_value=1, max_value=10_000),
    status=st.sampled_from(["complete", "no_answer", "interrupted", "failed", "streaming"]),
    text=text,
    html=text,
    references=st.lists(references, max_size=5).map(tuple),
    withheld=st.booleans(),
)
events = st.one_of(
    st.builds(
        ReferencesEvent,
        answer_id=ids,
        conversation_id=text,
        turn=st.integers(min_value=1, max_value=10_000),
        references=st.lists(references, max_size=5).map(tuple),
    ),
    st.builds(TokenEvent, text=text),
    st.builds(CitationEvent, number=st.integers(min_value=1, max_value=999), document_id=ids),
    st.builds(
        DoneEvent,
        answer=payloads,
        number_map=st.dictionaries(st.integers(1, 999), st.integers(1, 999), max_size=5),
    ),
    st.builds(
        ErrorEvent,
        message=text,
        answer_id=st.none() | ids,
        code=st.none() | st.sampled_from(["failed", "busy", "interrupted"]),
    ),
)


def test_the_strategy_covers_every_event_type() -> None:
    assert set(EVENT_TYPES) == {"references", "token", "citation", "done", "error"}


@given(event=events, seq=st.none() | ids)
def test_every_event_round_trips_through_its_dict_json_and_msgpack(event, seq) -> None:  # type: ignore[no-untyped-def]
    data = event.to_dict()
    assert data["type"] == event.type
    assert event_from_dict(data) == event
    assert event_from_dict(json.loads(json.dumps(data))) == event
    assert event_from_dict(msgpack.unpackb(msgpack.packb(data))) == event
    numbered = StreamEvent(seq=seq, event=event)
    assert StreamEvent.from_dict(json.loads(json.dumps(numbered.to_dict()))) == numbered
    assert numbered.terminal == isinstance(event, DoneEvent | ErrorEvent)


def test_a_withdrawn_source_stays_withdrawn_after_a_round_trip() -> None:
    # The bug that started this: a replayed done lost `available` and drew a live link.
    gone = Reference(1, 7, "Old policy", "/d/7", 0.5, "…", anchor="a9-s1", available=False)
    done = DoneEvent(answer=AnswerPayload(9, "c", 1, "complete", "x [1]", "<p>x</p>", (gone,)))
    back = event_from_dict(json.loads(json.dumps(done.to_dict())))
    assert isinstance(back, DoneEvent)
    assert back.answer.references[0].available is False
    assert back.answer.references[0].anchor == "a9-s1"


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": "nope"},
        {"type": "token"},
        {"type": "citation", "number": "x", "document_id": 1},
        {"type": "done", "answer_id": 1},
        {
            "type": "references",
            "answer_id": 1,
            "conversation_id": "c",
            "turn": 1,
            "references": [{}],
        },
    ],
)
def test_a_dict_that_is_no_event_is_refused_clearly(data) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EventFormatError):
        event_from_dict(data)
