"""A provider for OpenAI and any server speaking its Chat Completions streaming protocol
(vLLM, Ollama, llama.cpp server, LM Studio). Needs the optional extra: ``pip install
".[openai]"``. Configured by ``ANSWERS`` (``MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``) or the environment (``ANSWERS_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from ..conf import answers_settings
from ..prompt import Prompt
from .base import ProviderError, Usage


def openai_base_url() -> str:
    return str(answers_settings.OPENAI_BASE_URL or os.environ.get("OPENAI_BASE_URL", ""))


def openai_api_key() -> str:
    return str(answers_settings.OPENAI_API_KEY or os.environ.get("OPENAI_API_KEY", ""))


class OpenAIProvider:
    name = "openai"

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

    async def stream(self, prompt: Prompt) -> AsyncIterator[str | Usage]:
        openai = self._openai
        try:
            response = await self._client.chat.completions.create(  # type: ignore[call-overload]
                model=self.model,
                messages=prompt.messages(),
                stream=True,
                stream_options={"include_usage": True},
                temperature=0.1,
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
