"""Helpers every test module shares (one place, as Zulip's ``test_classes.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync

from answers import pipeline, services


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
