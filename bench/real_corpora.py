"""12. Questions among real documentation (issue 23): the time from an ask to its
``references`` event on the demo corpus, and on the demo corpus with the HTML documentation
Debian ships for Django, PostgreSQL, SciPy and pandas ingested beside it, on each backend.

Each backend gets two databases, each served by a process of its own
(``python -m bench.real_corpora demo|docs``): one holds the demo corpus (``ingest
--python-docs``), the other the demo corpus and the doc sets (``ingest``; their chunks/s
printed). Each process asks every Python question of ``eval/python-docs.*.jsonl`` once to
warm up; then the two take turns, a quarter of the questions at a time, so that drift in
the machine's speed (this 2-core machine moves by up to 2x within minutes) falls on both
alike: every question is timed once on each. Packages that are not installed are left out,
and the rows say which sets ran (``apt-get install python-django-doc postgresql-doc-15
python-scipy-doc python-pandas-doc``). Target: p50 with the doc sets within 2x of the demo
corpus's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
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


ROUNDS = 4  # turns each database takes; each times a quarter of the questions


def _serve(kind: str) -> None:
    """The child: build its corpus (``demo``: the demo corpus; ``docs``: it and the doc
    sets), print what it built as a JSON line, warm up, then for each round number read
    from stdin time that round's questions and print their latencies as a JSON line."""
    from asgiref.sync import async_to_sync
    from django.core.management import call_command
    from django.test.utils import override_settings

    from answers.models import Chunk
    from answers.registry import get_search_backend
    from tests.providers import ScriptedProvider

    from .pipeline import _answers, _time_to_references, asker

    call_command("migrate", verbosity=0)
    call_command("ingest", python_docs=True, no_progress=True, stdout=io.StringIO())
    built: dict[str, Any] = {"backend": get_search_backend().name}
    if kind == "docs":
        sets = installed_doc_sets()
        before = Chunk.objects.count()
        start = time.perf_counter()
        for path in sets.values():
            call_command("ingest", str(path), no_progress=True, stdout=io.StringIO())
        elapsed = time.perf_counter() - start
        built |= {
            "sets": sorted(sets),
            "ingest_chunks_per_s": (Chunk.objects.count() - before) / elapsed if elapsed else 0.0,
            "ingest_seconds": elapsed,
        }
    built["chunks"] = Chunk.objects.count()
    print(json.dumps(built), flush=True)
    questions = _questions()
    user = asker()
    measure = async_to_sync(_time_to_references)
    with override_settings(ANSWERS=_answers()):
        ScriptedProvider.script = ["Short answer [1]."]
        for question in questions:  # warm-up: stems, statistics pages, plans
            measure(user, question)
        for line in sys.stdin:
            part = questions[int(line) :: ROUNDS]
            print(json.dumps([measure(user, question) for question in part]), flush=True)


class _Child:
    """One ``_serve`` process on ``database_url``."""

    def __init__(self, kind: str, database_url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.real_corpora", kind],
            cwd=services.SETTINGS_FILE.parent.parent,
            env={**os.environ, "DATABASE_URL": database_url},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.built: dict[str, Any] = self._reply()

    def _reply(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"python -m bench.real_corpora failed ({code}), see above")
        return json.loads(line)

    def round(self, number: int) -> list[float]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{number}\n")
        self.process.stdin.flush()
        latencies: list[float] = self._reply()
        return latencies

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def measure(demo_url: str, docs_url: str) -> dict[str, Any]:
    """Both databases built, then timed taking turns (the order reversed each round)."""
    with contextlib.ExitStack() as stack:
        demo = _Child("demo", demo_url)
        stack.callback(demo.close)
        docs = _Child("docs", docs_url)
        stack.callback(docs.close)
        latencies: dict[str, list[float]] = {"demo": [], "docs": []}
        for number in range(ROUNDS):
            turns = [("demo", demo), ("docs", docs)]
            for name, child in turns if number % 2 == 0 else reversed(turns):
                latencies[name] += child.round(number)
    return {
        "backend": docs.built["backend"],
        "questions": len(latencies["docs"]),
        "demo": {"chunks": demo.built["chunks"], "latencies": latencies["demo"]},
        "docs": {**docs.built, "latencies": latencies["docs"]},
    }


def _rows(result: dict[str, Any]) -> list[Row]:
    demo, docs = result["demo"], result["docs"]
    backend = result["backend"]
    sets = "+".join(docs["sets"])
    at_demo = f"@demo ({demo['chunks']:,} chunks)"
    at_docs = f"@demo+{sets} ({docs['chunks']:,} chunks)"
    note = (
        f"{result['questions']} Python questions, each timed once after a warm-up pass, "
        f"the two databases taking turns ({ROUNDS} rounds)"
    )
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
    sqlite = [f"sqlite:///{folder / f'real-corpora-{kind}.sqlite3'}" for kind in ("demo", "docs")]
    rows = _rows(measure(*sqlite))
    try:
        with _database("_demo") as demo_url, _database("_docs") as docs_url:
            rows += _rows(measure(demo_url, docs_url))
    except services.Unavailable as exc:  # without psycopg or a server
        print(f"[bench] real corpora on PostgreSQL skipped: {exc}", file=sys.stderr)
    return rows


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    _serve(sys.argv[1])


if __name__ == "__main__":
    main()
