"""9. Search scoped to the asker's documents (ADR 0009): its cost on each backend.

Each backend is measured in a process of its own (``python -m bench.scoped_search``, as
section 8 does), on the demo corpus and on section 2b's replicated corpus, with every
20th document restricted to a group. Per search, three askers: none (``documents=None``,
the unscoped search every ask ran before ADR 0009: the same code path), an outsider (5 %
of the chunks out of scope: on SQLite the BM25 computed from the vocabulary), and a member
of the group (everything in scope: on SQLite FTS5's own ``bm25()`` again).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from . import services
from .postgres import _database
from .report import Row, median, p95

SECTION = "9. search scoped to the asker's documents"
RESTRICT_EVERY = 20  # every 20th document is restricted to the group


def _restrict_every_nth(n: int) -> None:
    from django.contrib.auth.models import Group

    from answers.models import Document

    vault, _ = Group.objects.get_or_create(name="bench-vault")
    ids = list(Document.objects.order_by("pk").values_list("pk", flat=True))[::n]
    Document.objects.filter(pk__in=ids).update(access=Document.Access.GROUPS)
    through = Document.groups.through
    existing = set(through.objects.filter(group=vault).values_list("document_id", flat=True))
    through.objects.bulk_create(
        [through(document_id=pk, group_id=vault.pk) for pk in ids if pk not in existing]
    )


def _askers() -> dict[str, Any]:
    from django.contrib.auth.models import Group, Permission, User

    from answers.selectors import document_list_visible

    ask = Permission.objects.get(codename="ask_question")
    out: dict[str, Any] = {"unscoped": None}
    for name, groups in (("outsider", []), ("member", ["bench-vault"])):
        user, _ = User.objects.get_or_create(username=f"bench-{name}")
        user.user_permissions.add(ask)
        user.groups.set(Group.objects.filter(name__in=groups))
        out[name] = document_list_visible(user=user)
    return out


def measure(sizes: dict[str, int], reps: int) -> dict[str, Any]:
    """The child: latencies per asker at each size, on ``DATABASE_URL``'s backend."""
    from django.core.management import call_command

    from answers.models import Chunk
    from answers.registry import get_search_backend

    from .backend_search import _maintain
    from .corpus import ReplicatedCorpus, chunk_count, python_topics
    from .retrieval import LIMIT, _latencies

    call_command("migrate", verbosity=0)
    backend = get_search_backend()
    topics = python_topics()
    grown = ReplicatedCorpus(topics)
    results: dict[str, Any] = {}
    for label, size in {"demo": chunk_count(topics), **sizes}.items():
        grown.grow_to(size)
        _restrict_every_nth(RESTRICT_EVERY)
        _maintain()
        scopes = _askers()
        out_of_scope = Chunk.objects.exclude(document__in=scopes["outsider"]).count()
        fns = {
            name: (lambda q, d=documents: backend.search(q, limit=LIMIT, documents=d))
            for name, documents in scopes.items()
        }
        results[label] = {
            "chunks": grown.chunks,
            "out_of_scope": out_of_scope,
            "latencies": _latencies(fns, reps),
        }
    return {"backend": backend.name, "sizes": results}


def _child(database_url: str, sizes: dict[str, int], reps: int) -> dict[str, Any]:
    spec = json.dumps({"sizes": sizes, "reps": reps})
    return services.child_json("bench.scoped_search", database_url, spec)


def _rows(result: dict[str, Any]) -> list[Row]:
    rows = []
    for label, figures in result["sizes"].items():
        lat = figures["latencies"]
        size = f"@{label} ({figures['chunks']:,} chunks, {figures['out_of_scope']:,} out of scope)"
        for asker in ("outsider", "member"):
            for name, stat in (("median", median), ("p95", p95)):
                rows.append(
                    Row(SECTION, f"{result['backend']} {asker} {name} {size}",
                        stat(lat[asker]), stat(lat["unscoped"]), "s", "unscoped search", None)
                )  # fmt: skip
    return rows


def run(folder: Any, *, full: bool) -> list[Row]:
    sizes = {"10k": 10_000} | ({"100k": 100_000} if full else {})
    rows = _rows(_child(f"sqlite:///{folder / 'scoped-search.sqlite3'}", sizes, 3))
    try:
        with _database() as url:  # Unavailable without psycopg or a server
            rows += _rows(_child(url, sizes, 3))
    except services.Unavailable as exc:
        print(f"[bench] scoped search on PostgreSQL skipped: {exc}", file=sys.stderr)
    return rows


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    spec = json.loads(sys.argv[1])
    print(json.dumps(measure(spec["sizes"], spec["reps"])))


if __name__ == "__main__":
    main()
