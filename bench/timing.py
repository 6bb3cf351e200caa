"""Small timing helpers."""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable


def per_call(fn: Callable[[], object], *, repeat: int = 5, min_batch: float = 0.1) -> float:
    """Seconds per call of ``fn``: the best of ``repeat`` batches of at least ``min_batch`` s.

    The best batch, not the mean: noise from other processes only ever adds time.
    """
    timer = timeit.Timer(fn)
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= min_batch:
            break
        number *= 2 if elapsed > min_batch / 10 else 10
    best = elapsed / number
    for _ in range(repeat - 1):
        best = min(best, timer.timeit(number) / number)
    return best


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
