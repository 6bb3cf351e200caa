"""The event vocabulary (answers/events.py): every event of every type comes back from its
dict, and from that dict sent as JSON (the SSE and WebSocket wire) or msgpack (Redis)."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from answers.events import (
    EVENT_TYPES,
    DoneEvent,
    ErrorEvent,
    EventFormatError,
    StreamEvent,
    event_from_dict,
)
from answers.types import AnswerPayload, Reference

# Every field of every event drawn by its type (hypothesis' inference, one strategy a
# type), within what the wire carries: msgpack's 64-bit integers, finite scores.
WIRE_TYPES: dict[type, st.SearchStrategy[Any]] = {
    int: st.integers(min_value=1, max_value=2**63 - 1),
    float: st.floats(min_value=0, max_value=1, allow_nan=False),
    str: st.text(),
    bool: st.booleans(),
    type(None): st.none(),
}


def drawn(hint: Any) -> st.SearchStrategy[Any]:
    """Values of the type ``hint``: plain ones, unions, tuples, mappings and dataclasses
    (each field by its own type)."""
    if hint in WIRE_TYPES:
        return WIRE_TYPES[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*map(drawn, args))
    if origin is tuple:
        return st.lists(drawn(args[0]), max_size=5).map(tuple)
    if origin is collections.abc.Mapping:
        return st.dictionaries(drawn(args[0]), drawn(args[1]), max_size=5)
    hints = typing.get_type_hints(hint)
    fields = {f.name: drawn(hints[f.name]) for f in dataclasses.fields(hint)}
    return st.builds(hint, **fields)


events = st.one_of(*map(drawn, EVENT_TYPES.values()))


def test_the_vocabulary_is_five_event_types() -> None:
    assert set(EVENT_TYPES) == {"references", "token", "citation", "done", "error"}


@given(event=events, seq=drawn(int | None))
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
