"""A provider for OpenAI and any server speaking its Chat Completions streaming protocol
(vLLM, Ollama, llama.cpp server, LM Studio). Needs the optional extra: ``pip install
".[openai]"``. Configured by ``ANSWERS`` (``MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``); the shipped project fills those from the environment
(``ANSWERS_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, see docs/settings.md).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from django.core.checks import CheckMessage, Error

from ..conf import answers_settings
from ..prompt import Prompt, RewritePrompt
from .base import ProviderError, Thinking, Usage

# A finish_reason that ends no answer: the text stops mid-way, or never was an answer.
# ("stop" ends one, and so do other servers' own words for it: "eos_token", "end_turn".)
_CUT_SHORT = {
    "length": "the model stopped at its token limit",
    "content_filter": "the answer was stopped by the server's content filter",
    "tool_calls": "the model called a tool instead of answering",
    "function_call": "the model called a function instead of answering",
}
# A 429 that no wait ends (the account is out of credit): a retry is refused again.
_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _storable(text: str) -> str:
    """``text`` with each UTF-16 surrogate pair joined into its character, and a lone half
    or a NUL (JSON carries both) replaced by U+FFFD: no UTF-8 stream can carry a lone half,
    PostgreSQL's text no NUL, and an answer that cannot be stored never ends."""
    if not _UNSTORABLE.search(text):
        return text
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class _WholeCharacters:
    """Deltas as whole characters. JSON escapes a character beyond U+FFFF as two halves
    (``\\ud83d\\ude00``), and a server that cuts text by UTF-16 units may send them in two
    chunks: a trailing first half waits for the next delta."""

    def __init__(self) -> None:
        self._high = ""

    def feed(self, text: str) -> str:
        text, self._high = self._high + text, ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            text, self._high = text[:-1], text[-1]
        return _storable(text)

    def close(self) -> str:
        high, self._high = self._high, ""
        return _storable(high)


def _thinks(delta: object) -> bool:
    """Whether ``delta`` carries a reasoning model's thinking (vLLM and DeepSeek call it
    ``reasoning_content``, Ollama and OpenRouter ``reasoning``)."""
    return any(
        isinstance(thought := getattr(delta, name, None), str) and thought != ""
        for name in ("reasoning_content", "reasoning")
    )


def _count(value: object) -> int | None:
    """A token count as a server reported it, if it is one (no column holds "many" or -5)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    return None


_OPEN_THINK, _CLOSE_THINK = "<think>", "</think>"


class _ThinkTags:
    """Content that opens with ``<think>`` (a reasoning model served without a reasoning
    parser: llama.cpp, older Ollama): what comes before ``</think>`` is thinking, never
    the answer. The tags may be cut anywhere between deltas."""

    def __init__(self) -> None:
        self._state = "start"  # then "think" or "answer"
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The answer's text in ``text``, and whether thinking was held back."""
        if self._state == "answer":
            return text, False
        self._held += text
        if self._state == "start":
            opening = self._held.lstrip()
            if not opening or _OPEN_THINK.startswith(opening):
                return "", bool(opening)  # too soon to tell
            if not opening.startswith(_OPEN_THINK):
                self._state, text, self._held = "answer", self._held, ""
                return text, False
            self._state, self._held = "think", opening[len(_OPEN_THINK) :]
        end = self._held.find(_CLOSE_THINK)
        if end < 0:
            self._held = self._held[-len(_CLOSE_THINK) :]  # a closing tag cut in two
            return "", True
        self._state, text, self._held = "answer", self._held[end + len(_CLOSE_THINK) :], ""
        return text.lstrip(), True

    def close(self) -> str:
        """What was held at the end: text that only looked like the start of a tag."""
        held, self._held = self._held, ""
        return held if self._state == "start" else ""


def _retry_after(exc: Any) -> float | None:
    """The wait a 429 or 503 asks for (``retry-after-ms``, OpenAI's, or ``Retry-After`` in
    seconds or as an HTTP date), if it names one."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = str(headers.get(name, "")).strip()
        wait: float | None
        try:
            wait = float(value) * scale
        except ValueError:
            wait = _seconds_until(value) if name == "retry-after" else None
        if wait is not None and not math.isnan(wait):
            return max(0.0, wait)
    return None


def _seconds_until(http_date: str) -> float | None:
    """Seconds from now until an HTTP date (RFC 9110 allows one in Retry-After)."""
    try:
        when = parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 850 / asctime forms carry no zone: GMT
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()


def _status_error(exc: Any, *, retryable: bool) -> ProviderError:
    code = getattr(exc, "code", None)
    reason = f"{type(exc).__name__}: HTTP {exc.status_code}"
    if isinstance(code, str) and code:
        reason += f" ({code})"
        retryable = retryable and code not in _NOT_RETRYABLE_CODES
    wait = _retry_after(exc) if retryable else None
    if wait is not None:
        reason += f", retry after {wait:g} s"
    # What the server said, for the admin (the asker only ever gets the generic error).
    body = getattr(exc, "body", None)
    said = body.get("error", body) if isinstance(body, dict) else None
    message = said.get("message") if isinstance(said, dict) else None
    if isinstance(message, str) and message.strip():
        reason += f": {' '.join(message.split())[:200]}"
    return ProviderError(reason, retryable=retryable, retry_after=wait)


def openai_base_url() -> str:
    return str(answers_settings.OPENAI_BASE_URL)


def openai_api_key() -> str:
    return str(answers_settings.OPENAI_API_KEY)


class OpenAIProvider:
    name = "openai"

    @classmethod
    def check(cls) -> list[CheckMessage]:
        """This provider's settings, for answers.checks (which knows none of them)."""
        errors: list[CheckMessage] = []
        try:
            import openai  # noqa: F401
        except ImportError:
            errors.append(
                Error(
                    "ANSWERS['PROVIDER'] is 'openai' but the openai package is not installed.",
                    hint='pip install ".[openai]"',
                    id="answers.E010",
                )
            )
        if not str(answers_settings.MODEL).strip():
            errors.append(
                Error(
                    "The openai provider needs a model name.",
                    hint="Set ANSWERS_MODEL (or ANSWERS['MODEL']), e.g. gpt-4o-mini or llama3.1.",
                    id="answers.E011",
                )
            )
        base_url = openai_base_url()
        parsed = urlsplit(base_url)
        if base_url and (parsed.scheme.lower() not in {"http", "https"} or not parsed.hostname):
            errors.append(
                Error(
                    "OPENAI_BASE_URL (ANSWERS['OPENAI_BASE_URL']) is not an http(s) URL with "
                    "a host: every question would fail.",
                    hint="e.g. http://127.0.0.1:11434/v1 (Ollama) or http://gpu-box:8000/v1 "
                    "(vLLM); empty for api.openai.com.",
                    id="answers.E017",
                )
            )
        if not base_url and not openai_api_key():
            errors.append(
                Error(
                    "The openai provider talks to api.openai.com but no API key is set.",
                    hint="Set OPENAI_API_KEY, or OPENAI_BASE_URL for a server of your own "
                    "(or ANSWERS['OPENAI_API_KEY'] / ANSWERS['OPENAI_BASE_URL']).",
                    id="answers.E012",
                )
            )
        return errors

    def __init__(self) -> None:
        import openai

        self._openai = openai
        self._client = openai.AsyncOpenAI(
            api_key=openai_api_key() or "not-needed",
            base_url=openai_base_url() or None,
            # The pipeline's guards own retries and timeouts; the SDK must not add its own.
            max_retries=0,
            timeout=float(answers_settings.TOTAL_TIMEOUT) + 5,
        )

    @property
    def model(self) -> str:
        return str(answers_settings.MODEL)

    def stream(self, prompt: Prompt) -> AsyncIterator[str | Usage | Thinking]:
        return self._completion(prompt.messages(), temperature=0.1)

    async def rewrite(self, prompt: RewritePrompt) -> str:
        """The follow-up rewritten to stand alone (``REWRITE_FOLLOWUPS``): the whole reply
        of the same streaming call, joined; the pipeline bounds its time."""
        parts = [
            delta
            async for delta in self._completion(prompt.messages(), temperature=0.0)
            if isinstance(delta, str)
        ]
        return "".join(parts)

    async def _completion(
        self, messages: list[dict[str, str]], *, temperature: float
    ) -> AsyncIterator[str | Usage | Thinking]:
        openai = self._openai
        try:
            response = await self._client.chat.completions.create(  # type: ignore[call-overload]
                model=self.model,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                temperature=temperature,
            )
        except (openai.RateLimitError, openai.InternalServerError) as exc:
            raise _status_error(exc, retryable=True) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.APIStatusError as exc:
            raise _status_error(exc, retryable=False) from exc
        finish: str | None = None
        got_text = False
        characters = _WholeCharacters()
        think_tags = _ThinkTags()
        chunks = aiter(response)
        # After the finish only a usage chunk and [DONE] are due: a server that then holds
        # the connection open has still answered, and must not fail it at IDLE_TIMEOUT.
        after_finish = float(answers_settings.IDLE_TIMEOUT) / 2
        try:
            while True:
                try:
                    if finish is None:
                        chunk = await anext(chunks)
                    else:
                        try:
                            async with asyncio.timeout(after_finish):
                                chunk = await anext(chunks)
                        except TimeoutError:
                            break
                except StopAsyncIteration:
                    break
                if getattr(chunk, "object", None) == "error":
                    # An error object of its own, not under "error" (older vLLM): the SDK
                    # passes it on as a chunk.
                    message = getattr(chunk, "message", None) or "no message"
                    raise ProviderError(f"the server sent an error: {message}"[:300])
                usage: Any = getattr(chunk, "usage", None)
                if usage is not None:
                    yield Usage(
                        prompt_tokens=_count(getattr(usage, "prompt_tokens", None)),
                        completion_tokens=_count(getattr(usage, "completion_tokens", None)),
                    )
                # Only the first choice is the answer (one was asked for); a chunk that is
                # no object at all has none.
                for choice in getattr(chunk, "choices", None) or ():
                    if getattr(choice, "index", 0) not in (0, None):
                        continue
                    finish = finish or getattr(choice, "finish_reason", None) or None
                    delta = getattr(choice, "delta", None)
                    content = getattr(delta, "content", None) if delta is not None else None
                    text = characters.feed(content) if isinstance(content, str) else ""
                    text, held = think_tags.feed(text)
                    if not text and (held or _thinks(delta)):
                        # A reasoning model's thinking is progress, not an empty delta.
                        yield Thinking()
                        continue
                    got_text = got_text or bool(text)
                    # An empty delta still counts: the guards cap endless empty streams.
                    yield text
            if rest := think_tags.feed(characters.close())[0] + think_tags.close():
                got_text = True
                yield rest
            if finish is None:
                # A cut connection can look like a clean end; real servers always finish.
                raise ProviderError("the stream ended without a finish_reason (cut off?)")
            if finish in _CUT_SHORT:
                # Stored as failed with what came: the reader must not take it for whole.
                raise ProviderError(f"{_CUT_SHORT[finish]} (finish_reason {finish!r})")
            if not got_text:
                raise ProviderError(f"the model finished with no text (finish_reason {finish!r})")
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.APIError as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            # Not JSON, or not UTF-8 (the SDK decodes each event): the server's fault.
            raise ProviderError(f"the server sent a malformed chunk ({exc})"[:300]) from exc
        finally:
            await response.close()
