"""Server-rendered fragments shared by the page and the WebSocket (one partial each)."""

from __future__ import annotations

from collections.abc import Sequence

from django.template.loader import render_to_string

from .types import Reference

PROVISIONAL, FINAL = "provisional", "final"


def render_sources_panel(*, references: Sequence[Reference], answer_id: int, state: str) -> str:
    """The Sources panel: ``provisional`` lists every retrieved source (prompt numbers),
    ``final`` the corrected list the answer's text cites."""
    return render_to_string(
        "answers/ask.html#sources-panel",
        {"references": references, "answer_id": answer_id, "panel_state": state},
    )
