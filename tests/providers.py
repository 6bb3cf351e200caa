"""Stand-ins for the remote LLM (the one edge we do not own), for pipeline tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from answers.prompt import Prompt


class ScriptedProvider:
    """Streams ``ScriptedProvider.script`` in the given deltas and records each prompt."""

    name = "scripted"
    model = "script-1"
    script: list[str] = ["Nothing to say."]
    prompts: list[Prompt] = []
    delay = 0.0

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        type(self).prompts.append(prompt)
        for delta in type(self).script:
            await asyncio.sleep(type(self).delay)
            yield delta


class ExplodingProvider:
    """Fails after one delta, like a provider whose connection breaks mid-answer."""

    name = "exploding"
    model = "boom-1"

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        yield "Partial answer [1]"
        raise RuntimeError("provider secret detail: upstream 500 at https://internal")


class MustNotBeCalledProvider:
    name = "never"
    model = "never-1"

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        raise AssertionError("the provider must not be called")
        yield ""  # pragma: no cover
