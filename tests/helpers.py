"""Helpers every test module shares (one place, as Zulip's ``test_classes.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

from asgiref.sync import async_to_sync

from answers import pipeline, services
from answers.search.base import SearchHit


def ask(**kwargs: Any) -> Any:
    """The whole pipeline from sync code: ``ask(user=..., question=...)`` gives the payload
    (looked up at each call, so a test may patch ``pipeline.answer_question``)."""
    return async_to_sync(pipeline.answer_question)(**kwargs)


def start(**kwargs: Any) -> Any:
    """``pipeline.start_answer`` from sync code: the run, its answer still streaming."""
    return async_to_sync(pipeline.start_answer)(**kwargs)


def bearer_token(user: Any, *, name: str = "test") -> str:
    """A fresh API token of ``user``, raw (as a service would hold it)."""
    return services.api_token_create(user=user, name=name)[1]


def bearer_headers(
    user: Any = None, *, name: str = "test", raw: str | None = None
) -> dict[str, str]:
    """HTTP headers, for ``headers=`` of a real client (httpx, the test client, the fuzzer):
    a fresh token of ``user``, or ``raw`` as it is (revoked, unknown, malformed)."""
    token = raw if raw is not None else bearer_token(user, name=name)
    return {"Authorization": f"Bearer {token}"}


def bearer(user: Any = None, *, name: str = "test", raw: str | None = None) -> dict[str, str]:
    """Django test client keyword arguments: ``client.get(path, **bearer(user))``;
    ``raw`` as for ``bearer_headers``."""
    return {"HTTP_AUTHORIZATION": bearer_headers(user, name=name, raw=raw)["Authorization"]}


# --- JSON API calls (Zulip's ``api_post``/``api_get``/``assert_json_error``) -----------------


def api_post(client: Any, path: str, body: object, *, user: Any = None, **extra: Any) -> Any:
    """POST ``body`` as JSON (a ``str`` or ``bytes`` is sent as it is) with a test client
    (``Client`` or ``AsyncClient``: await the result); ``user``: with a fresh bearer token
    of that user; ``extra``: the client's keywords (``HTTP_ACCEPT=...``, ``headers=...``)."""
    if user is not None:
        extra = {**bearer(user), **extra}
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **extra)


def api_get(client: Any, path: str, *, user: Any = None, **extra: Any) -> Any:
    """GET ``path``; ``user`` and ``extra`` as for ``api_post``."""
    if user is not None:
        extra = {**bearer(user), **extra}
    return client.get(path, **extra)


def assert_json_error(
    response: Any, status: int | tuple[int, ...], code: str | None = None
) -> dict[str, Any]:
    """``response`` is one of the API's JSON errors (``ErrorOut``: ``detail`` and ``code``)
    with ``status`` (or one of them) and, if given, ``code``: its body.

    For a test client's response and for an ``httpx`` one alike."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, response.content
    assert response.headers["Content-Type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert "detail" in body, body
    if code is not None:
        assert body.get("code") == code, body
    return body


def assert_chunk_counts_stored() -> None:
    """Every document's stored chunk count is its chunks' (migration 0016: document
    ranking reads it instead of counting them per question)."""
    from django.db.models import Count

    from answers.models import Chunk, Document

    stored = dict(Document.objects.values_list("pk", "chunk_count"))
    counted = dict(Chunk.objects.values_list("document_id").annotate(n=Count("id")).order_by())
    assert stored, "no documents to check"
    assert stored == {pk: counted.get(pk, 0) for pk in stored}


def write(path: Path, data: bytes | str) -> Path:
    """``data`` written to ``path``, folders created (text as UTF-8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def lock_folder(folder: Path, monkeypatch: Any) -> None:
    """``chmod 000`` on ``folder``. Run as root (which
    reads anything, CAP_DAC_OVERRIDE) the OS is made to refuse as it would anyone else: it
    is the edge we do not own. Listing the folder, or reaching anything in it, then fails
    with EACCES."""
    import errno

    folder.chmod(0)  # pytest's clean-up of tmp_path restores what it needs to remove it
    try:
        os.listdir(folder)
    except PermissionError:
        return  # refused for real
    locked = os.fspath(folder)

    def refused(path: Any) -> bool:
        if isinstance(path, int):
            return False
        text = os.fsdecode(os.fspath(path))
        return text == locked or text.startswith(locked + os.sep)

    def deny(function: Any, inside_only: bool) -> Any:
        def denied(path: Any, *args: Any, **kwargs: Any) -> Any:
            if refused(path) and not (inside_only and os.fsdecode(os.fspath(path)) == locked):
                raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))
            return function(path, *args, **kwargs)

        return denied

    # The folder itself can be stat'ed (its parent is readable), not listed; nothing in it
    # can be reached.
    monkeypatch.setattr(os, "scandir", deny(os.scandir, inside_only=False))
    monkeypatch.setattr(os, "listdir", deny(os.listdir, inside_only=False))
    monkeypatch.setattr(os, "stat", deny(os.stat, inside_only=True))
    monkeypatch.setattr(os, "lstat", deny(os.lstat, inside_only=True))


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


def fail_access_check(monkeypatch: Any, error: Exception | None = None) -> None:
    """Every access check from now on raises (``error``): the one seam is
    ``selectors.document_visible_ids``, which every filter of sources by the viewer goes
    through (retrieval in the pipeline, references in the presenters)."""
    from answers import selectors

    def broken(**kwargs: Any) -> set[int]:
        raise error or RuntimeError("the permission backend is down")

    monkeypatch.setattr(selectors, "document_visible_ids", broken)


# --- Reviewers (the admin) --------------------------------------------------------------

REVIEWER_PERMISSIONS = (
    "view_answer",
    "change_answer",
    "view_document",
    "change_document",
    "delete_document",
    "view_feedback",
)


def staff_reviewer(name: str, *, groups: tuple[str, ...] = (), review_all: bool = False) -> Any:
    """A staff user with the reviewer permissions, in ``groups``; ``review_all``: also
    ``answers.review_all_answers``."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=True)
    codenames = REVIEWER_PERMISSIONS + (("review_all_answers",) if review_all else ())
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    user.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])
    return user


def query_plan(queryset: Any) -> list[str]:
    """The database's plan for ``queryset``, a step a line: SQLite's EXPLAIN QUERY PLAN, or
    PostgreSQL's EXPLAIN with sequential scans off for the rest of the test's transaction
    (a test's tiny tables are cheaper to scan: this asks what the indexes can do)."""
    from django.db import connection

    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return [str(row[-1]) for row in cursor.fetchall()]
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return [str(row[0]) for row in cursor.fetchall()]


def lines_executed(module: Any, call: Any) -> int:
    """How many lines of ``module``'s own code ``call()`` runs: a count of work that
    repeats exactly, for growth checks that must not time anything."""
    import sys

    count = 0
    filename = module.__file__

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == filename else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count
