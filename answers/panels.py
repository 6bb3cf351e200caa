"""Server-rendered fragments shared by the page and the WebSocket (one partial each)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.template.loader import render_to_string

from .rendering import source_anchor
from .selectors import answer_anchor_prefix
from .types import Reference

PROVISIONAL, FINAL = "provisional", "final"


def render_sources_panel(*, references: Sequence[Reference], answer_id: int, state: str) -> str:
    """The Sources panel: ``provisional`` lists every retrieved source (prompt numbers),
    ``final`` the corrected list the answer's text cites."""
    return render_to_string(
        "answers/ask.html#sources-panel",
        {"references": references, "answer_id": answer_id, "panel_state": state},
    )


def render_event_sources_panel(event_type: str, data: dict[str, Any]) -> str | None:
    """The panel a stream event carries: provisional with ``references``, final with
    ``done``; None for the other events."""
    state = {"references": PROVISIONAL, "done": FINAL}.get(event_type)
    if state is None:
        return None
    answer_id = int(data["answer_id"])
    prefix = answer_anchor_prefix(answer_id=answer_id)
    references = [
        Reference.from_dict(item, anchor=source_anchor(prefix, int(item["index"])))
        for item in data["references"]
    ]
    return render_sources_panel(references=references, answer_id=answer_id, state=state)
