"""A provider for OpenAI and any server speaking its Chat Completions streaming protocol
(vLLM, Ollama, llama.cpp server, LM Studio). Needs the optional extra: ``pip install
".[openai]"``. Configured by ``ANSWERS`` (``MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``); the shipped project fills those from the environment
(``ANSWERS_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, see docs/settings.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from django.core.checks import CheckMessage, Error

from ..conf import answers_settings
from ..prompt import Prompt, RewritePrompt
from .base import ProviderError, Usage


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
        if not openai_base_url() and not openai_api_key():
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

    def stream(self, prompt: Prompt) -> AsyncIterator[str | Usage]:
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
    ) -> AsyncIterator[str | Usage]:
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
            raise ProviderError(
                f"{type(exc).__name__}: HTTP {exc.status_code}", retryable=True
            ) from exc
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.APIStatusError as exc:
            raise ProviderError(f"{type(exc).__name__}: HTTP {exc.status_code}") from exc
        finished = False
        try:
            async for chunk in response:
                usage: Any = getattr(chunk, "usage", None)
                if usage is not None:
                    yield Usage(
                        prompt_tokens=getattr(usage, "prompt_tokens", None),
                        completion_tokens=getattr(usage, "completion_tokens", None),
                    )
                for choice in chunk.choices or ():
                    finished = finished or bool(getattr(choice, "finish_reason", None))
                    delta = getattr(choice, "delta", None)
                    content = getattr(delta, "content", None) if delta is not None else None
                    # An empty delta still counts: the guards cap endless empty streams.
                    yield content if isinstance(content, str) else ""
            if not finished:
                # A cut connection can look like a clean end; real servers always finish.
                raise ProviderError("the stream ended without a finish_reason (cut off?)")
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}", retryable=True) from exc
        except openai.APIError as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            await response.close()
