"""Concurrent writers on real connections: OS processes for ingest, threads for answering.

Runs on whichever database the suite runs on. The tests are transactional so that the
other connections see what each one commits; they assert outcomes, never timings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections

from answers import services
from answers.conf import answers_settings
from answers.ingestion import chunk_text, extract_file
from answers.models import Answer, Chunk, Conversation, Document, Feedback, Question
from tests.live import database_url

pytestmark = pytest.mark.django_db(transaction=True)

PROJECT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

SUMMARY = re.compile(
    r"Ingested (?P<total>\d+) document\(s\): (?P<created>\d+) created, (?P<updated>\d+) updated, "
    r"(?P<unchanged>\d+) unchanged, (?P<failed>\d+) failed; (?P<chunks>\d+) chunk\(s\) written\."
)

# Each child sets Django up and connects first, says so, then waits for the go file, so the
# children's first writes start within a millisecond or two of each other whatever their
# start-up took. Mode "manage.py": run the command line given, as manage.py would. Mode
# "versions": ingest each file of a folder under the key of the same-named file in another
# folder (one version of a file that changed while two ingests ran), printing each outcome.
CHILD = r"""
import json, pathlib, sys, time
import django
django.setup()
from django.db import connection
connection.ensure_connection()
ready, go, mode, *args = sys.argv[1:]
if mode == "manage.py":  # import the command now, not in the race
    from django.core.management import get_commands, load_command_class
    load_command_class(get_commands()[args[0]], args[0])
else:
    from answers import services
    from answers.conf import answers_settings
    from answers.ingestion import extract_file
pathlib.Path(ready).touch()
deadline = time.monotonic() + 60
while not pathlib.Path(go).exists():
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.001)
if mode == "manage.py":
    from django.core.management import execute_from_command_line
    execute_from_command_line(["manage.py", *args])
else:
    version_dir, key_dir = map(pathlib.Path, args)
    for path in sorted(version_dir.iterdir()):
        extracted = extract_file(path)
        key = str((key_dir / path.name).resolve())
        result = services.document_ingest(
            source_key=key, title=extracted.title, body=extracted.body,
            chunk_size=int(answers_settings.CHUNK_SIZE),
        )
        print(json.dumps([key, result.outcome]), flush=True)
"""


def run_together(tmp_path: Path, jobs: Sequence[Sequence[str]]) -> list[tuple[int, str, str]]:
    """Run one child per job, released at once; ``(exit code, stdout, stderr)`` of each."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    go = tmp_path / "go"
    children: list[tuple[subprocess.Popen[bytes], Path, Path, Path]] = []
    try:
        for number, job in enumerate(jobs):
            ready, out, err = (tmp_path / f"child-{number}.{s}" for s in ("ready", "out", "err"))
            with out.open("wb") as stdout, err.open("wb") as stderr:
                process = subprocess.Popen(
                    [sys.executable, "-c", CHILD, str(ready), str(go), *job],
                    cwd=PROJECT,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                )
            children.append((process, ready, out, err))
        deadline = time.monotonic() + 60
        while not all(ready.exists() for _, ready, _, _ in children):
            for process, _, _, err in children:
                assert process.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the children never got ready"
            time.sleep(0.01)
        go.touch()
        for process, *_ in children:
            process.wait(timeout=120)
    finally:
        for process, *_ in children:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [
        (process.returncode, out.read_text(), err.read_text()) for process, _, out, err in children
    ]


def run_threads(count: int, work: Callable[[int, threading.Barrier], T]) -> list[T]:
    """``work(index, barrier)`` in ``count`` threads, each on its own database connection."""
    barrier = threading.Barrier(count, timeout=30)
    results: dict[int, T] = {}
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = work(index, barrier)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()  # the others stop waiting; the first error is the one raised
        finally:
            connections.close_all()  # this thread's connections only

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return [results[i] for i in range(count)]


def body_of(number: int, version: int = 1) -> str:
    """A body of several chunks, different for every file and version."""
    words = [f"w{number}v{version}x{i}" for i in range(700 + 37 * number)]
    paragraphs = [" ".join(words[i : i + 90]) + "." for i in range(0, len(words), 90)]
    return f"# Document {number:02d}\n\n" + "\n\n".join(paragraphs) + "\n"


def write_folder(root: Path, count: int, version: int = 1) -> list[Path]:
    root.mkdir(parents=True)
    paths = [root / f"doc-{n:02d}.md" for n in range(count)]
    for number, path in enumerate(paths):
        path.write_text(body_of(number, version), encoding="utf-8")
    return paths


def assert_whole(document: Document, body: str) -> None:
    """The document holds exactly ``body``, cut into exactly its chunks 0..n-1."""
    assert document.body == body
    expected = chunk_text(body, size=int(answers_settings.CHUNK_SIZE))
    assert len(expected) > 1
    stored = document.chunks.order_by("ordinal", "pk").values_list("ordinal", "text", "start")
    assert list(stored) == [(span.ordinal, span.text, span.start) for span in expected]


def summary(stdout: str) -> dict[str, int]:
    match = SUMMARY.search(stdout)
    assert match is not None, stdout
    return {key: int(value) for key, value in match.groupdict().items()}


# ---------------------------------------------------------------------------- ingest


@pytest.mark.parametrize("group", [None, "research"])
def test_three_processes_ingesting_one_folder_store_each_document_once(
    tmp_path: Path, group: str | None
) -> None:
    paths = write_folder(tmp_path / "docs", 24)
    job = ["manage.py", "ingest", "--no-progress", str(tmp_path / "docs")]
    job += ["--group", group] if group else []

    outcomes = run_together(tmp_path, [job, job, job])

    for code, _, stderr in outcomes:
        assert code == 0, stderr
        assert "Traceback" not in stderr, stderr
    counts = [summary(stdout) for _, stdout, _ in outcomes]
    for count in counts:
        assert (count["total"], count["failed"], count["updated"]) == (len(paths), 0, 0)
        assert count["created"] + count["unchanged"] == len(paths)
    assert sum(count["created"] for count in counts) == len(paths)  # each one, once

    keys = [str(path.resolve()) for path in paths]
    documents = list(Document.objects.filter(source_key__in=keys).order_by("source_key"))
    assert [d.source_key for d in documents] == sorted(keys)
    for document, path in zip(documents, sorted(paths), strict=True):
        assert_whole(document, extract_file(path).body)
        if group:  # created once however many processes asked for it, and on every document
            assert document.access == Document.Access.GROUPS
            assert list(document.groups.values_list("name", flat=True)) == [group]
    chunks = Chunk.objects.filter(document__source_key__in=keys).count()
    assert chunks == sum(count["chunks"] for count in counts)  # each written once, by its creator


def test_two_processes_ingesting_two_versions_keep_one_whole_version(tmp_path: Path) -> None:
    count = 24
    write_folder(tmp_path / "v1", count, version=1)
    write_folder(tmp_path / "v2", count, version=2)
    key_dir = tmp_path / "docs"
    key_dir.mkdir()

    outcomes = run_together(
        tmp_path,
        [["versions", str(tmp_path / version), str(key_dir)] for version in ("v1", "v2")],
    )

    reported: dict[str, dict[str, int]] = {}  # key -> outcome -> version that reported it
    for version, (code, stdout, stderr) in enumerate(outcomes, start=1):
        assert code == 0, stderr
        lines = stdout.splitlines()
        assert len(lines) == count, stdout
        for key, outcome in map(json.loads, lines):
            reported.setdefault(key, {})[outcome] = version
    assert len(reported) == count
    documents = {d.source_key: d for d in Document.objects.filter(source_key__in=reported)}
    assert set(documents) == set(reported)
    for key, by_outcome in reported.items():
        # The bodies differ, so whichever process came second replaced the first's version.
        assert set(by_outcome) == {"created", "updated"}, by_outcome
        winner = tmp_path / f"v{by_outcome['updated']}" / Path(key).name
        assert_whole(documents[key], extract_file(winner).body)


# ------------------------------------------------------------------------- answering


@pytest.fixture
def unlimited(settings):  # type: ignore[no-untyped-def]
    """These answers stay ``streaming`` and come many a minute: the per-user limits, which
    question_create enforces (tests/test_limits.py), are not what is tested here."""
    settings.ANSWERS = {
        **settings.ANSWERS,
        "MAX_CONCURRENT_STREAMS": 1000,
        "QUESTIONS_PER_MINUTE": 100_000,
    }


def _ask(user: User, conversation: Conversation | None, text: str) -> Question:
    created = services.question_create(
        user=user,
        conversation=conversation,
        text=text,
        candidates=[],
        provider="test",
        model="",
        retrieval_ms=0,
    )
    return created.question


def test_concurrent_questions_in_one_conversation_take_consecutive_turns(
    asker: User, unlimited: None
) -> None:
    conversation = _ask(asker, None, "first").conversation
    threads, rounds = 4, 5

    def ask(index: int, barrier: threading.Barrier) -> list[tuple[str, int]]:
        asked = []
        for round_ in range(rounds):
            barrier.wait()
            question = _ask(asker, conversation, f"q{index}-{round_}")
            asked.append((question.text, question.turn))
        return asked

    returned = dict(pair for asked in run_threads(threads, ask) for pair in asked)

    stored = dict(Question.objects.filter(conversation=conversation).values_list("text", "turn"))
    assert sorted(stored.values()) == list(range(1, threads * rounds + 2))
    assert stored == {"first": 1, **returned}
    answers = Answer.objects.filter(question__conversation=conversation)
    assert answers.filter(status=Answer.Status.STREAMING).count() == len(stored)


def test_concurrent_first_feedback_ends_as_one_row(asker: User, unlimited: None) -> None:
    answers = [_ask(asker, None, f"question {n}").answer for n in range(5)]
    # Feedback is for answers that have finished (services.feedback_record).
    Answer.objects.filter(pk__in=[a.pk for a in answers]).update(status=Answer.Status.COMPLETE)
    answers = list(Answer.objects.filter(pk__in=[a.pk for a in answers]).order_by("pk"))
    threads = 4
    given = {(("up", "down")[i % 2], f"from thread {i}") for i in range(threads)}

    def rate(index: int, barrier: threading.Barrier) -> None:
        rating, comment = ("up", "down")[index % 2], f"from thread {index}"
        for answer in answers:
            barrier.wait()
            services.feedback_record(answer=answer, user=asker, rating=rating, comment=comment)

    run_threads(threads, rate)

    for answer in answers:
        rows = list(Feedback.objects.filter(answer=answer).values_list("user", "rating", "comment"))
        assert len(rows) == 1
        user, rating, comment = rows[0]
        assert user == asker.pk
        assert (rating, comment) in given  # one writer's whole feedback, never a mix
