"""Server-rendered fragments shared by the page and the WebSocket (one partial each)."""

from __future__ import annotations

from collections.abc import Sequence

from django.template.loader import render_to_string

from .events import DoneEvent, Event, ReferencesEvent
from .types import Reference

PROVISIONAL, FINAL = "provisional", "final"


def render_sources_panel(*, references: Sequence[Reference], answer_id: int, state: str) -> str:
    """The Sources panel: ``provisional`` lists every retrieved source (prompt numbers),
    ``final`` the corrected list the answer's text cites."""
    return render_to_string(
        "answers/sources.html#sources-panel",
        {"references": references, "answer_id": answer_id, "panel_state": state},
    )


def render_event_sources_panel(event: Event) -> str | None:
    """The panel a stream event carries: provisional with ``references``, final with
    ``done``; None for the other events."""
    if isinstance(event, ReferencesEvent):
        references, answer_id, state = event.references, event.answer_id, PROVISIONAL
    elif isinstance(event, DoneEvent):
        references, answer_id, state = event.answer.references, event.answer.answer_id, FINAL
    else:
        return None
    return render_sources_panel(references=references, answer_id=answer_id, state=state)
