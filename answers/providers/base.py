"""The provider interface: an async iterator of text deltas for a prompt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ..prompt import Prompt


class Provider(Protocol):
    #: Stored on each answer, with the model, so reviewers know what wrote it.
    name: str

    @property
    def model(self) -> str: ...

    def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        """Yield the answer as text deltas, citing sources as ``[n]``."""
        ...
