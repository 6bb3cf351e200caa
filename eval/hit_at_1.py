"""hit@1 of eval/questions.json (ADR 0013): the demo corpus plus the real files it names.

Run with a throwaway database, e.g.::

    DJANGO_DEBUG=1 DATABASE_URL=sqlite:////tmp/eval.sqlite3 .venv/bin/python eval/hit_at_1.py

It migrates, ingests, then reports hit@1 with the configured backend ("app"); on SQLite
also with FTS5's porter tokenizer over the same chunks ("porter", what migration 0007
replaced), ranked by FTS5's bm25 over the same OR of the question's terms.
"""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from answers.models import Chunk, Document  # noqa: E402
from answers.registry import get_search_backend  # noqa: E402
from answers.search.base import query_terms  # noqa: E402


def _key(document_id: int, keys: dict[int, str]) -> str:
    return keys[document_id]


def main() -> None:
    spec = json.loads((ROOT / "eval" / "questions.json").read_text())
    call_command("migrate", verbosity=0)
    files = [f for f in spec["files"] if Path(f).exists()]
    call_command("ingest", "--python-docs", *files, "--no-progress", verbosity=0)
    keys = {
        pk: key.removeprefix("python-docs:")
        for pk, key in Document.objects.values_list("pk", "source_key")
    }
    titles = dict(Document.objects.values_list("pk", "title"))
    doc_of = dict(Chunk.objects.values_list("pk", "document_id"))
    rankers = {"app": _app_top}
    if connection.vendor == "sqlite":
        rankers["porter"] = _porter_ranker()
    for name, top in rankers.items():
        hits = trapped = 0
        for item in spec["questions"]:
            ranked = top(item["question"])
            found = ranked[0] if ranked else None
            got = keys[doc_of[found[0]]] if found else None
            # A real file (not a demo topic) among the top 5 of a demo question: the trap.
            files_hit = {titles[doc_of[c]] for c, _ in ranked if keys[doc_of[c]].startswith("/")}
            if files_hit:
                trapped += 1
                print(f"  {name} trap: {item['question']!r} top 5 holds {sorted(files_hit)}")
            hit = got in item["expected"]
            hits += hit
            if not hit:
                title = titles[doc_of[found[0]]] if found else "-"
                score = f"{found[1]:.2f}" if found else "-"
                print(f"  {name} miss: {item['question']!r} -> {title!r} ({score})")
        total = len(spec["questions"])
        print(
            f"{connection.vendor} {name}: hit@1 {hits}/{total} = {hits / total:.3f}; "
            f"questions with a real file in the top 5: {trapped}"
        )


def _app_top(question: str) -> list[tuple[int, float]]:
    return [(h.chunk_id, h.score) for h in get_search_backend().search(question, limit=5)]


def _porter_ranker():  # type: ignore[no-untyped-def]
    fts5 = importlib.import_module("answers.migrations.0002_sqlite_fts5")
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE answers_document (id INTEGER PRIMARY KEY, title TEXT)")
    db.execute("CREATE TABLE answers_chunk (id INTEGER PRIMARY KEY, document_id INT, text TEXT)")
    db.executemany(
        "INSERT INTO answers_document VALUES (?, ?)", Document.objects.values_list("id", "title")
    )
    db.executemany(
        "INSERT INTO answers_chunk VALUES (?, ?, ?)",
        Chunk.objects.values_list("id", "document_id", "text"),
    )
    for statement in fts5.FORWARD:
        db.execute(statement)

    def top(question: str) -> list[tuple[int, float]]:
        terms = query_terms(question)
        if not terms:
            return []
        expression = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = db.execute(
            "SELECT rowid, rank FROM answers_chunk_fts WHERE answers_chunk_fts MATCH ? "
            "ORDER BY rank LIMIT 5",
            [expression],
        ).fetchall()
        return [(r[0], -r[1]) for r in rows]

    return top


if __name__ == "__main__":
    main()
