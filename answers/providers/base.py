"""The provider interface: an async iterator of text deltas for a prompt.

A provider may also yield one ``Usage`` (token counts, when its server reports them) and
``Thinking`` (progress without text), and
raises ``ProviderError`` for failures it can classify; ``retryable`` errors before the first
token are retried by the pipeline (see ``answers.guards``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..prompt import Prompt, RewritePrompt


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class Thinking:
    """A sign of life without text: a reasoning model thinking before it answers. The
    guards wait on for the next delta (each one within the timeouts, all within
    TOTAL_TIMEOUT) and count it as no empty delta; nothing of it is shown or stored."""


class ProviderError(Exception):
    """A provider failure. The message is for logs and reviewers, never for the asker.
    ``retry_after``: seconds the server asked to wait before a retry (429/503), if it said."""

    def __init__(
        self, message: str, *, retryable: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class Provider(Protocol):
    #: Stored on each answer, with the model, so reviewers know what wrote it.
    name: str

    @property
    def model(self) -> str: ...

    def stream(self, prompt: Prompt) -> AsyncIterator[str | Usage | Thinking]:
        """Yield the answer as text deltas, citing sources as ``[n]``."""
        ...


@runtime_checkable
class QuestionRewriter(Protocol):
    """A provider that can also rewrite a follow-up into a standalone question
    (``REWRITE_FOLLOWUPS``; the offline extractive provider cannot)."""

    async def rewrite(self, prompt: RewritePrompt) -> str: ...
