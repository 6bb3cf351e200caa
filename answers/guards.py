"""Guards on every provider stream: timeouts, caps, and retry before the first token.

Each guard that trips raises ``GuardTripped``; the pipeline then stores the answer as
``failed`` with the partial text and tells the client only a generic message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass

from .conf import answers_settings
from .providers.base import ProviderError, Thinking, Usage

logger = logging.getLogger(__name__)


class GuardTripped(Exception):
    """A stream broke one of the limits; the message says which, for logs and reviewers."""


@dataclass(frozen=True)
class StreamLimits:
    first_token_timeout: float
    idle_timeout: float
    total_timeout: float
    max_empty_deltas: int
    max_answer_chars: int
    retries: int
    retry_backoff: float

    @classmethod
    def from_settings(cls) -> StreamLimits:
        return cls(
            first_token_timeout=float(answers_settings.FIRST_TOKEN_TIMEOUT),
            idle_timeout=float(answers_settings.IDLE_TIMEOUT),
            total_timeout=float(answers_settings.TOTAL_TIMEOUT),
            max_empty_deltas=int(answers_settings.MAX_EMPTY_DELTAS),
            max_answer_chars=int(answers_settings.MAX_ANSWER_CHARS),
            retries=int(answers_settings.PROVIDER_RETRIES),
            retry_backoff=float(answers_settings.RETRY_BACKOFF),
        )


async def guarded_stream(
    open_stream: Callable[[], AsyncIterator[str | Usage | Thinking]], limits: StreamLimits
) -> AsyncIterator[str | Usage]:
    """Deltas from ``open_stream()``, within ``limits``.

    Failures before the first token that the provider calls retryable (429, 5xx, a refused
    connection) are retried with exponential backoff; once text has been shown, never
    (a second attempt would contradict what the user already read).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.total_timeout
    attempt = 0
    length = 0
    while True:
        got_text = False
        try:
            async with aclosing(open_stream()) as stream:  # type: ignore[type-var]
                empty = 0
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise GuardTripped(f"total duration over {limits.total_timeout:g}s")
                    wait = limits.idle_timeout if got_text else limits.first_token_timeout
                    try:
                        # A timeout scope, not ``wait_for``: that wraps every delta in a
                        # task of its own (and a turn of the loop to start it).
                        async with asyncio.timeout(min(wait, remaining)):
                            item = await anext(stream)
                    except StopAsyncIteration:
                        return
                    except TimeoutError:
                        if remaining <= wait:
                            raise GuardTripped(
                                f"total duration over {limits.total_timeout:g}s"
                            ) from None
                        which = "idle" if got_text else "first-token"
                        raise GuardTripped(f"{which} timeout after {wait:g}s") from None
                    if isinstance(item, Usage):
                        yield item
                        continue
                    if isinstance(item, Thinking):
                        empty = 0  # alive, and not empty: the next delta is waited for anew
                        continue
                    if not item:
                        empty += 1
                        if empty > limits.max_empty_deltas:
                            raise GuardTripped(f"more than {limits.max_empty_deltas} empty deltas")
                        continue
                    empty = 0
                    length += len(item)
                    if length > limits.max_answer_chars:
                        raise GuardTripped(f"answer longer than {limits.max_answer_chars} chars")
                    got_text = True
                    yield item
        except ProviderError as exc:
            if got_text or not exc.retryable or attempt >= limits.retries:
                raise
            # A server that names its wait (Retry-After) is not asked again sooner; one
            # that asks for longer than a first token may take gets no retry at all.
            asked = exc.retry_after
            if asked is not None and asked > limits.first_token_timeout:
                raise
            attempt += 1
            delay = max(limits.retry_backoff * 2 ** (attempt - 1), asked or 0.0)
            logger.warning("Provider failed before the first token (%s); retry %d in %.2fs",
                           exc, attempt, delay)  # fmt: skip
            if loop.time() + delay >= deadline:
                raise
            await asyncio.sleep(delay)
