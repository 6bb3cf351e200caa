"""Providers for section 6 whose every token carries its emission time (``time.time()``).

    ANSWERS_PROVIDER=bench.providers.FastStampedProvider    # as fast as it can
    ANSWERS_PROVIDER=bench.providers.PacedStampedProvider   # 20 tokens/s

Each token is ``t<seconds since the epoch, 6 decimals> ``: a plain word, so the citation
filter passes it through unchanged (it may hold back the trailing space). The clients
(``bench.ws_clients``) parse the stamps out of the joined text as it arrives.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from typing import Any

TOKENS = int(os.environ.get("BENCH_STREAM_TOKENS", "40"))
PACE = 0.05  # seconds between tokens: 20 tokens/s


def stamp() -> str:
    return f"t{time.time():.6f} "


class FastStampedProvider:
    name = "bench-fast"
    delay = 0.0

    @property
    def model(self) -> str:
        return f"stamped-{TOKENS}"

    async def stream(self, prompt: Any) -> AsyncIterator[str]:
        for _ in range(TOKENS):
            yield stamp()
            # Always yield to the loop, as the real providers do.
            await asyncio.sleep(self.delay)


class PacedStampedProvider(FastStampedProvider):
    name = "bench-paced"
    delay = PACE
