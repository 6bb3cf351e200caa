"""12. Questions among real documentation (issue 23): the time from an ask to its
``references`` event on the demo corpus, then with the HTML documentation Debian ships for
Django, PostgreSQL, SciPy and pandas ingested beside it, on each backend.

Each backend runs in a process of its own (``python -m bench.real_corpora``, as sections 8
and 9 do) on a fresh database: the demo corpus through ``ingest --python-docs``, every
Python question of ``eval/python-docs.*.jsonl`` asked once to warm up and then timed, the
doc sets ingested through ``ingest`` (their chunks/s printed), and the same questions timed
again. Packages that are not installed are left out, and the rows say which sets ran
(``apt-get install python-django-doc postgresql-doc-15 python-scipy-doc
python-pandas-doc``). Target: p50 at the largest corpus within 2x of the demo corpus's.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import services
from .postgres import REPO, _database
from .report import Row, median, p95

SECTION = "12. questions among real documentation"
DOC_SETS = {
    "django": Path("/usr/share/doc/python-django-doc/html"),
    "postgresql": Path("/usr/share/doc/postgresql-doc-15/html"),
    "scipy": Path("/usr/share/doc/python-scipy-doc/html"),
    "pandas": Path("/usr/share/doc/python-pandas-doc/html"),
}
QUESTION_FILES = ("eval/python-docs.dev.jsonl", "eval/python-docs.test.jsonl")


def installed_doc_sets() -> dict[str, Path]:
    return {name: path for name, path in DOC_SETS.items() if path.is_dir()}


def _questions() -> list[str]:
    questions = []
    for name in QUESTION_FILES:
        for line in (REPO / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                questions.append(json.loads(line)["question"])
    return questions


def _timed(questions: list[str]) -> list[float]:
    from asgiref.sync import async_to_sync
    from django.test.utils import override_settings

    from tests.providers import ScriptedProvider

    from .pipeline import _answers, _time_to_references, asker

    user = asker()
    measure = async_to_sync(_time_to_references)
    with override_settings(ANSWERS=_answers()):
        ScriptedProvider.script = ["Short answer [1]."]
        for question in questions:  # warm-up: stems, statistics pages, plans
            measure(user, question)
        return [measure(user, question) for question in questions]


def measure() -> dict[str, Any]:
    """The child: the demo corpus, then the doc sets, on ``DATABASE_URL``'s backend."""
    from django.core.management import call_command

    from answers.models import Chunk
    from answers.registry import get_search_backend

    call_command("migrate", verbosity=0)
    call_command("ingest", python_docs=True, no_progress=True, stdout=io.StringIO())
    questions = _questions()
    out: dict[str, Any] = {"backend": get_search_backend().name, "questions": len(questions)}
    out["demo"] = {"chunks": Chunk.objects.count(), "latencies": _timed(questions)}
    sets = installed_doc_sets()
    before = Chunk.objects.count()
    start = time.perf_counter()
    for path in sets.values():
        call_command("ingest", str(path), no_progress=True, stdout=io.StringIO())
    elapsed = time.perf_counter() - start
    added = Chunk.objects.count() - before
    out["docs"] = {
        "sets": sorted(sets),
        "chunks": Chunk.objects.count(),
        "ingest_chunks_per_s": added / elapsed if elapsed else 0.0,
        "ingest_seconds": elapsed,
        "latencies": _timed(questions),
    }
    return out


def _child(database_url: str) -> dict[str, Any]:
    return services.child_json("bench.real_corpora", database_url)


def _rows(result: dict[str, Any]) -> list[Row]:
    demo, docs = result["demo"], result["docs"]
    backend = result["backend"]
    sets = "+".join(docs["sets"])
    at_demo = f"@demo ({demo['chunks']:,} chunks)"
    at_docs = f"@demo+{sets} ({docs['chunks']:,} chunks)"
    note = f"{result['questions']} Python questions, each timed once after a warm-up pass"
    rows = []
    for name, stat, target in (("p50", median, ("<=", 2.0)), ("p95", p95, None)):
        rows.append(
            Row(SECTION, f"{backend} time to references {name} {at_docs}",
                stat(docs["latencies"]), stat(demo["latencies"]), "s", f"same {at_demo}",
                target, note=note)
        )  # fmt: skip
    rows.append(
        Row(SECTION, f"{backend} ingest of {sets}", docs["ingest_chunks_per_s"], 2000.0,
            "chunks/s", "issue 23's target", (">=", 1.0),
            note=f"{docs['chunks'] - demo['chunks']:,} chunks in {docs['ingest_seconds']:.0f} s")
    )  # fmt: skip
    return rows


def run(folder: Any, *, full: bool) -> list[Row]:
    del full  # the doc sets are the corpus; there is no larger mode
    if not installed_doc_sets():
        raise services.Unavailable(
            "no Debian doc set installed (apt-get install python-django-doc postgresql-doc-15 "
            "python-scipy-doc python-pandas-doc)"
        )
    rows = _rows(_child(f"sqlite:///{folder / 'real-corpora.sqlite3'}"))
    try:
        with _database() as url:  # Unavailable without psycopg or a server
            rows += _rows(_child(url))
    except services.Unavailable as exc:
        print(f"[bench] real corpora on PostgreSQL skipped: {exc}", file=sys.stderr)
    return rows


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    print(json.dumps(measure()))


if __name__ == "__main__":
    main()
