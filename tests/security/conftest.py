"""Fixtures for the security suite (helpers are in ``tests.helpers``, ``tests.sockets``
and, for rendered output, ``inert``)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def quiet_questions(settings: Any) -> None:
    """Many questions a minute (the per-user rate limit is tested elsewhere)."""
    settings.ANSWERS = {**settings.ANSWERS, "QUESTIONS_PER_MINUTE": 100_000}
