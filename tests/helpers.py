"""Helpers every test module shares (one place, as Zulip's ``test_classes.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from asgiref.sync import async_to_sync

from answers import pipeline, services
from answers.search.base import SearchHit


def ask(**kwargs: Any) -> Any:
    """The whole pipeline from sync code: ``ask(user=..., question=...)`` gives the payload
    (looked up at each call, so a test may patch ``pipeline.answer_question``)."""
    return async_to_sync(pipeline.answer_question)(**kwargs)


def bearer_token(user: Any, *, name: str = "test") -> str:
    """A fresh API token of ``user``, raw (as a service would hold it)."""
    return services.api_token_create(user=user, name=name)[1]


def bearer(user: Any, *, name: str = "test") -> dict[str, str]:
    """Django test client keyword arguments: ``client.get(path, **bearer(user))``."""
    return {"HTTP_AUTHORIZATION": f"Bearer {bearer_token(user, name=name)}"}


def bearer_headers(user: Any, *, name: str = "test") -> dict[str, str]:
    """HTTP headers, for ``headers=`` of a real client (httpx, the test client)."""
    return {"Authorization": f"Bearer {bearer_token(user, name=name)}"}


def write(path: Path, data: bytes | str) -> Path:
    """``data`` written to ``path``, folders created (text as UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


# --- the fault seam ---------------------------------------------------------------------


class FailingSearch:
    """A search backend that fails at every search and counts the attempts (``calls``)."""

    name = "failing"
    calls: ClassVar[int] = 0
    error: ClassVar[Exception] = RuntimeError("retrieval must not run for this request")

    def search(self, query: str, *, limit: int, documents: Any = None) -> list[SearchHit]:
        type(self).calls += 1
        raise type(self).error


def fail_retrieval(settings: Any, error: Exception | None = None) -> type[FailingSearch]:
    """Every retrieval from now on fails (with ``error``): the one seam is the configured
    search backend, which every way into retrieval goes through (``answers.registry``).
    Give ``pytest-django``'s ``settings``; the class returned counts the attempts."""
    FailingSearch.calls = 0
    FailingSearch.error = error or RuntimeError("retrieval must not run for this request")
    settings.ANSWERS = {**settings.ANSWERS, "SEARCH_BACKEND": "tests.helpers.FailingSearch"}
    return FailingSearch
