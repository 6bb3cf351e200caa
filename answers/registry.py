"""The swappable parts (search backend, reranker, provider), built once from ``ANSWERS``."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .conf import answers_settings

if TYPE_CHECKING:
    from .providers.base import Provider
    from .rerankers import Reranker
    from .search.base import SearchBackend


@cache
def get_search_backend() -> SearchBackend:
    return import_string(answers_settings.search_backend_path())()


@cache
def get_reranker() -> Reranker | None:
    path = answers_settings.RERANKER
    return import_string(path)() if path else None


@cache
def get_provider() -> Provider:
    return import_string(answers_settings.provider_path())()


def reset() -> None:
    get_search_backend.cache_clear()
    get_reranker.cache_clear()
    get_provider.cache_clear()


@receiver(setting_changed)
def _reset_on_answers_change(*, setting: str, **kwargs: Any) -> None:
    # The registry listens itself, so answers.conf need not import it (no cycle).
    if setting == "ANSWERS":
        reset()
