from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.test import Client

from answers import selectors, services
from answers.conf import answers_settings
from answers.management.commands.ingest import python_doc_topics
from answers.models import Answer, ApiToken, Chunk, Document
from tests import documents as docs
from tests.helpers import assert_chunk_counts_stored, lock_folder, write
from tests.live import REPO_ROOT, database_url

pytestmark = pytest.mark.django_db

SUMMARY = re.compile(
    r"Ingested (?P<total>\d+) document\(s\): (?P<created>\d+) created, (?P<updated>\d+) updated, "
    r"(?P<unchanged>\d+) unchanged, (?P<failed>\d+) failed; (?P<chunks>\d+) chunk\(s\) written\."
)


def run(*args: str, **options: object) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def summary(stdout: str) -> dict[str, int]:
    match = SUMMARY.search(stdout)
    assert match is not None, stdout
    return {key: int(value) for key, value in match.groupdict().items()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """One file of each text format, one in a subfolder, plus files that must be skipped."""
    root = tmp_path / "docs"
    write(root / "alpha.md", "# Alpha guide\n\nThe alpha guide explains wombat grooming.\n")
    write(root / "beta-notes.txt", "Plain notes about the beta release of the numbat tracker.\n")
    write(root / "gamma.rst", "Gamma manual\n============\n\nThe gamma manual covers quolls.\n")
    write(
        root / "delta.html",
        "<html><head><title>Delta page</title><script>var x = 1;</script></head>"
        "<body><h1>Heading</h1><p>The delta page is about bilbies.</p></body></html>",
    )
    write(root / "sub" / "epsilon.md", "# Epsilon chapter\n\nEpsilon talks about echidnas.\n")
    write(root / "script.py", "print('not a document')\n")
    write(root / ".hidden.md", "# Hidden\n\nNever ingested.\n")
    return root


def ingested(root: Path) -> dict[str, Document]:
    prefix = str(root.resolve())
    return {d.title: d for d in Document.objects.filter(source_key__startswith=prefix)}


# ---------------------------------------------------------------------------- ingest


def test_ingest_folder_creates_documents_with_titles(folder: Path) -> None:
    stdout, stderr = run("ingest", str(folder))
    counts = summary(stdout)
    assert counts["total"] == 5
    assert (counts["created"], counts["updated"], counts["unchanged"], counts["failed"]) == (
        5,
        0,
        0,
        0,
    )
    documents = ingested(folder)
    assert set(documents) == {
        "Alpha guide",
        "beta-notes",
        "Gamma manual",
        "Delta page",
        "Epsilon chapter",
    }
    assert counts["chunks"] == Chunk.objects.filter(document__in=documents.values()).count()
    delta = documents["Delta page"]
    assert "bilbies" in delta.body and "var x" not in delta.body
    assert delta.source_key == str((folder / "delta.html").resolve())
    assert documents["Epsilon chapter"].access == Document.Access.EVERYONE
    assert stderr == ""


def test_ingest_again_is_all_unchanged_and_writes_no_chunks(folder: Path) -> None:
    run("ingest", str(folder))
    chunk_ids = set(Chunk.objects.values_list("pk", flat=True))
    stdout, _ = run("ingest", str(folder))
    counts = summary(stdout)
    assert (counts["created"], counts["updated"], counts["unchanged"]) == (0, 0, 5)
    assert counts["chunks"] == 0
    assert set(Chunk.objects.values_list("pk", flat=True)) == chunk_ids
    assert_chunk_counts_stored()


def test_an_ingest_that_wrote_leaves_the_index_maintained(folder: Path, monkeypatch) -> None:
    # The backend's maintain() (PostgreSQL: the stats ledger vacuumed, planner statistics
    # refreshed) runs after an ingest that wrote something, and only then.
    from answers.registry import get_search_backend

    backend = type(get_search_backend())
    calls: list[object] = []
    real = backend.maintain
    monkeypatch.setattr(backend, "maintain", lambda self: calls.append(real(self)))
    run("ingest", str(folder))
    assert len(calls) == 1
    run("ingest", str(folder))  # all unchanged: nothing to tidy
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_maintaining_the_index_outside_a_transaction_vacuums_and_finds_the_same() -> None:
    from answers.registry import get_search_backend

    call_command("ingest", python_docs=True, no_progress=True, stdout=io.StringIO())
    backend = get_search_backend()
    before = backend.search("How does the try statement handle exceptions?", limit=5)
    backend.maintain()  # VACUUM on PostgreSQL: only outside a transaction
    after = backend.search("How does the try statement handle exceptions?", limit=5)
    assert before and after == before
    if connection.vendor == "postgresql":
        # Every page of the documents marked all-visible: the scope's reads of their access
        # and id stay index-only (migration 0015) right after an ingest.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT relpages, relallvisible FROM pg_class WHERE relname = 'answers_document'"
            )
            pages, all_visible = cursor.fetchone()
        assert pages > 0 and all_visible == pages


def test_changing_one_file_through_the_single_document_path_keeps_its_chunk_count(
    folder: Path,
) -> None:
    run("ingest", str(folder))
    gamma = ingested(folder)["Gamma manual"]
    longer = "Gamma manual\n============\n\n" + "Dunnarts hunt at night. " * 400
    result = services.document_ingest(
        source_key=gamma.source_key, title="Gamma manual", body=longer, chunk_size=400
    )
    assert result.outcome == "updated" and result.chunks > 1
    again = services.document_ingest(
        source_key=gamma.source_key, title="Gamma manual", body=longer, chunk_size=400
    )
    assert again.outcome == "unchanged" and again.chunks == result.chunks
    assert_chunk_counts_stored()


def test_migration_0016_counts_the_chunks_of_documents_ingested_before_it(
    folder: Path,
) -> None:
    import importlib

    from django.apps import apps

    run("ingest", str(folder))
    Document.objects.update(chunk_count=None)  # as the column is added
    migration = importlib.import_module("answers.migrations.0016_document_chunk_count")
    migration.count_chunks(apps, None)
    assert_chunk_counts_stored()


def test_changing_one_file_rechunks_only_it(folder: Path) -> None:
    run("ingest", str(folder))
    before = {
        title: list(doc.chunks.values_list("pk", flat=True))
        for title, doc in ingested(folder).items()
    }
    write(folder / "gamma.rst", "Gamma manual\n============\n\nNow the manual covers dunnarts.\n")

    stdout, _ = run("ingest", str(folder))
    counts = summary(stdout)
    assert (counts["created"], counts["updated"], counts["unchanged"]) == (0, 1, 4)
    assert counts["chunks"] == 1
    after = ingested(folder)
    for title, chunk_ids in before.items():
        current = list(after[title].chunks.values_list("pk", flat=True))
        if title == "Gamma manual":
            assert set(current).isdisjoint(chunk_ids)
        else:
            assert current == chunk_ids, title
    gamma = after["Gamma manual"]
    assert "dunnarts" in gamma.chunks.get().text
    assert "quolls" not in gamma.body
    assert_chunk_counts_stored()


def test_bad_files_are_reported_and_do_not_stop_the_rest(folder: Path) -> None:
    bad_text = write(folder / "latin1.txt", "caf\xe9 au lait".encode("latin-1"))
    bad_pdf = write(folder / "broken.pdf", b"%PDF-1.4\nthis is not really a pdf\n%%EOF")

    stdout, stderr = run("ingest", str(folder))
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (7, 5, 2)
    lines = stderr.strip().splitlines()
    assert len(lines) == 2
    text_line = next(line for line in lines if "latin1.txt" in line)
    pdf_line = next(line for line in lines if "broken.pdf" in line)
    assert text_line.startswith(f"Skipped {bad_text.resolve()}: ")
    assert "not valid UTF-8" in text_line
    assert pdf_line.startswith(f"Skipped {bad_pdf.resolve()}: ")
    assert "not a readable PDF" in pdf_line
    assert len(ingested(folder)) == 5
    assert not Document.objects.filter(source_key__endswith="latin1.txt").exists()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_file_name_not_valid_utf8_is_reported_and_the_others_ingested(
    tmp_path: Path, jobs: str
) -> None:
    # A Latin-1 name: Python holds its \xe9 byte as a lone surrogate, which no database
    # stores. The batch it was written with (other.md) used to roll back with it.
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.md"), "wb") as handle:
        handle.write(b"# Cafe\n\nAbout coffee.\n")
    write(tmp_path / "other.md", "# Other\n\nThe other file is about numbats.\n")

    stdout, stderr = run("ingest", str(tmp_path), "--jobs", jobs)
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (2, 1, 1)
    assert set(ingested(tmp_path)) == {"Other"}
    (line,) = stderr.strip().splitlines()
    # Shown with the byte escaped: a terminal, a log or a pipe can always print it.
    assert line == (
        f"Skipped {tmp_path.resolve()}/caf\\xe9.md: its file name is not valid UTF-8; rename it"
    )


def test_every_file_failing_is_a_command_error(tmp_path: Path) -> None:
    write(tmp_path / "empty.md", "   \n")
    with pytest.raises(CommandError, match="Every file failed"):
        run("ingest", str(tmp_path))


def test_ingest_missing_path_is_a_command_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CommandError, match=re.escape(f"No such file or folder: {missing}")):
        run("ingest", str(missing))


def test_ingest_without_paths_or_python_docs_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="Give at least one PATH, or --python-docs"):
        run("ingest")


def test_ingest_folder_without_supported_files_is_a_command_error(tmp_path: Path) -> None:
    write(tmp_path / "notes.gz", b"\x1f\x8b\x08")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="No supported files found"):
        call_command("ingest", str(tmp_path), stdout=out, stderr=err)
    assert "notes.gz: unsupported file type .gz" in out.getvalue()


def test_paths_that_are_not_regular_files_are_reported_and_the_rest_ingested(
    tmp_path: Path,
) -> None:
    good = write(tmp_path / "good.md", "# Good\n\nA good file about bilbies.\n")
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)  # never opened: a read would wait for a writer forever
    link = tmp_path / "link.md"
    link.symlink_to(tmp_path / "deleted.md")

    stdout, stderr = run("ingest", str(good), str(fifo), os.devnull, str(link))
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (4, 1, 3)
    assert set(stderr.strip().splitlines()) == {
        f"Skipped {fifo}: not a regular file",
        f"Skipped {os.devnull}: not a regular file",
        f"Skipped {link}: a broken symbolic link",
    }
    assert set(ingested(tmp_path)) == {"Good"}


def test_a_broken_symbolic_link_in_a_folder_is_reported(tmp_path: Path) -> None:
    link = tmp_path / "gone.md"
    link.symlink_to(tmp_path / "deleted.md")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="Every file failed"):
        call_command("ingest", str(tmp_path), stdout=out, stderr=err)
    assert err.getvalue().strip() == f"Skipped {link}: a broken symbolic link"

    write(tmp_path / "kept.md", "# Kept\n\nKept beside the broken link.\n")
    stdout, stderr = run("ingest", str(tmp_path))
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (2, 1, 1)
    assert stderr.strip() == f"Skipped {link}: a broken symbolic link"


def test_a_path_too_long_for_a_source_key_is_reported_and_the_rest_ingested(
    tmp_path: Path,
) -> None:
    """The path is the document's source key: one longer than the column holds failed the
    whole batch it was written in (PostgreSQL: "value too long")."""
    limit = Document._meta.get_field("source_key").max_length
    deep = tmp_path
    while len(str(deep)) <= limit:
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    long = write(deep / "long.md", "# Long\n\nA file about numbats, too deep.\n")
    write(tmp_path / "near.md", "# Near\n\nA file about numbats, near the top.\n")

    stdout, stderr = run("ingest", str(tmp_path))
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (2, 1, 1)
    assert stderr.strip() == (
        f"Skipped {long}: its path is longer than {limit:,} characters; move it"
    )
    assert set(ingested(tmp_path)) == {"Near"}


def test_ingest_real_documents_of_every_type(tmp_path: Path) -> None:
    """Documents made by the libraries that write them ingest as clean text, real titles."""
    root = tmp_path / "real"
    write(root / "q3.docx", docs.docx_bytes(
        title=None, heading="Quarterly review", paragraphs=["Sales of kumquats rose."]
    ))  # fmt: skip
    write(root / "deck.pptx", docs.pptx_bytes(slide_title="Roadmap 2027", text="Ship platypus"))
    write(root / "book.xlsx", docs.xlsx_bytes(title="Budget", rows=[["wombat food", 12.5]]))
    write(root / "guide.pdf", docs.pdf_bytes(title="Field guide", lines=["Quokkas smile."]))
    write(root / "untitled.pdf", docs.pdf_bytes(title=None, lines=["Numbat Handbook", "Ants."]))
    write(root / "open.pdf", docs.encrypted_pdf_bytes(user_password=""))
    write(root / "closure.html", docs.TEXINFO_HTML)
    write(root / "faq.html", docs.SITE_HTML)
    write(root / "notes.md", "---\ntitle: Front matter title\n---\n\nBody text.\n")
    # Bad input: one clear line each, nothing else lost.
    write(root / "broken.docx", b"PK\x03\x04 not really a zip")
    write(root / "locked.pdf", docs.encrypted_pdf_bytes(user_password="secret"))
    write(root / "archive.gz", b"\x1f\x8b\x08")
    write(root / "old.doc", b"\xd0\xcf\x11\xe0")

    stdout, stderr = run("ingest", str(root), verbosity=2)
    counts = summary(stdout)
    assert (counts["total"], counts["created"], counts["failed"]) == (11, 9, 2)
    documents = ingested(root)
    assert {title: doc.body for title, doc in documents.items()} == {
        "Quarterly review": "Quarterly review\n\nSales of kumquats rose.\n\ncell one | cell two",
        "Roadmap 2027": "Roadmap 2027\n\nShip platypus",
        "Budget": "Figures\nwombat food | 12.5",
        "Field guide": "Quokkas smile.",
        "Numbat Handbook": "Numbat Handbook\nAnts.",
        "Secret": "Secret",
        "Closure Example (mylib manual)": (
            # HTML is stored as Markdown (ADR 0026): headings, <code>, <pre>.
            "### 2.6 Closure Example\n\nA trivial example that binds `fputs` to a stream.\n\n"
            "```\nint main()\n{\n  return 0;\n}\n```"
        ),
        "Billing FAQ": "# How refunds work\n\nRefunds reach the card within five days.",
        "Front matter title": "Body text.",  # the rest of the front matter left out
    }
    for doc in documents.values():
        assert doc.chunks.count() >= 1
    errors = stderr.strip().splitlines()
    assert len(errors) == 2, stderr
    assert any("broken.docx: not a readable .docx file" in line for line in errors)
    assert any("locked.pdf: PDF is password-protected" in line for line in errors)
    # Unsupported files: a count by type, then each file with its reason at verbosity 2.
    assert "Skipped 2 file(s) of unsupported types (1 .doc, 1 .gz)" in stdout
    assert f"Skipped {(root / 'archive.gz').resolve()}: unsupported file type .gz" in stdout
    # No library warnings or log lines in what the user reads.
    assert "pypdf" not in stdout + stderr and "Warning" not in stdout + stderr

    stdout, _ = run("ingest", str(root))
    assert "Skipped 2 file(s) of unsupported types" in stdout
    assert "archive.gz" not in stdout
    assert summary(stdout)["unchanged"] == 9


def test_ingest_group_restricts_documents_to_its_members(
    folder: Path, asker, django_user_model
) -> None:  # type: ignore[no-untyped-def]
    assert not Group.objects.filter(name="research").exists()
    run("ingest", str(folder), "--group", "research")

    group = Group.objects.get(name="research")
    documents = ingested(folder)
    assert len(documents) == 5
    for document in documents.values():
        assert document.access == Document.Access.GROUPS
        assert list(document.groups.all()) == [group]

    ids = {d.pk for d in documents.values()}
    assert selectors.document_visible_ids(user=asker, document_ids=ids) == set()
    researcher = django_user_model.objects.create_user(username="researcher", password="x")
    researcher.groups.add(group)
    assert selectors.document_visible_ids(user=researcher, document_ids=ids) == ids


def test_ingest_group_name_longer_than_the_field_is_a_command_error(folder: Path) -> None:
    limit = Group._meta.get_field("name").max_length
    assert limit is not None
    with pytest.raises(CommandError, match=f"at most {limit} characters"):
        run("ingest", str(folder), "--group", "g" * (limit + 1))
    assert not ingested(folder)
    assert not Group.objects.filter(name__startswith="g" * limit).exists()


def test_ingest_group_given_empty_is_a_command_error_not_a_public_ingest(folder: Path) -> None:
    # `--group "$TEAM"` with $TEAM unset: the documents were ingested open to everyone.
    with pytest.raises(CommandError, match="--group needs a name"):
        run("ingest", str(folder), "--group", "")
    assert not ingested(folder)


def test_ingest_an_empty_path_is_a_command_error_not_the_current_folder(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `ingest "$DIR"` with $DIR unset: Path("") is ".", and the folder it ran in was ingested.
    monkeypatch.chdir(folder)
    with pytest.raises(CommandError, match="An empty PATH was given"):
        run("ingest", "")
    assert not ingested(folder)


def test_ingest_group_is_not_made_when_nothing_is_ingested(tmp_path: Path) -> None:
    write(tmp_path / "notes.gz", b"\x1f\x8b\x08")
    with pytest.raises(CommandError, match="No supported files found"):
        run("ingest", str(tmp_path), "--group", "wombat-keepers")
    assert not Group.objects.filter(name="wombat-keepers").exists()


def test_ingest_group_restricts_documents_ingested_before(folder: Path, asker) -> None:  # type: ignore[no-untyped-def]
    run("ingest", str(folder))
    stdout, _ = run("ingest", str(folder), "--group", "research")
    assert summary(stdout)["unchanged"] == 5
    ids = {d.pk for d in ingested(folder).values()}
    assert selectors.document_visible_ids(user=asker, document_ids=ids) == set()


def test_ingest_python_docs_is_idempotent() -> None:
    documents = Document.objects.count()
    chunk_ids = set(Chunk.objects.values_list("pk", flat=True))
    stdout, stderr = run("ingest", "--python-docs")
    counts = summary(stdout)
    topics = len(python_doc_topics())
    assert counts["total"] == topics
    assert (counts["created"], counts["updated"], counts["unchanged"]) == (0, 0, topics)
    assert counts["chunks"] == 0
    assert Document.objects.count() == documents
    assert set(Chunk.objects.values_list("pk", flat=True)) == chunk_ids
    assert stderr == ""


def test_a_topic_stored_before_markdown_bodies_is_rechunked_by_ingest() -> None:
    # ADR 0026: the stored body is the extractor's output and the content hash is over it,
    # so a changed extractor is a changed body; no --force is needed.
    from pydoc_data.topics import topics

    services.document_ingest(
        source_key="python-docs:pass", title="The pass statement", body=topics["pass"],
        chunk_size=int(answers_settings.CHUNK_SIZE),
    )  # fmt: skip
    assert (
        '"pass" is a null operation'
        in Chunk.objects.get(document__source_key="python-docs:pass").text
    )
    stdout, _ = run("ingest", "--python-docs")
    assert summary(stdout)["updated"] == 1
    text = Chunk.objects.get(document__source_key="python-docs:pass").text
    assert "`pass` is a null operation" in text and '"pass"' not in text.split("```")[-1]


# -------------------------------------------------------------------- createapitoken


def test_createapitoken_prints_a_working_token_last(asker) -> None:  # type: ignore[no-untyped-def]
    stdout, stderr = run("createapitoken", "asker", "--name", "ci")
    raw = stdout.strip().splitlines()[-1]
    token = services.api_token_authenticate(raw=raw)
    assert token is not None
    assert token.user == asker
    assert token.name == "ci"
    assert token.prefix in stderr
    assert raw not in stderr
    assert ApiToken.objects.get().token_hash != raw


def test_createapitoken_unknown_user_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        run("createapitoken", "ghost")
    assert not ApiToken.objects.exists()


def test_createapitoken_inactive_user_is_a_command_error(asker) -> None:  # type: ignore[no-untyped-def]
    asker.is_active = False
    asker.save()
    with pytest.raises(CommandError, match="inactive"):
        run("createapitoken", "asker")
    assert not ApiToken.objects.exists()


# ------------------------------------------------------------------------------- ask


# ``ask`` runs its own event loop (asyncio.run), so its ORM work happens in sync_to_async's
# worker thread, on another connection: the users it reads must be committed.
ask_db = pytest.mark.django_db(transaction=True)


@ask_db
def test_ask_streams_the_answer_then_numbered_sources(corpus, asker) -> None:  # type: ignore[no-untyped-def]
    stdout, _ = run("ask", "What is a lambda expression?", "--user", "asker")
    answer = Answer.objects.get(question__user=asker)
    assert answer.status == Answer.Status.COMPLETE
    text, sources = stdout.split("Sources:\n", 1)
    assert answer.final_text in text
    assert re.search(r"\[\d+\]", text)
    entries = re.findall(r"^  \[(\d+)\] (.+) \((.+)\) score (\d\.\d\d)$", sources, re.M)
    assert entries
    assert [int(n) for n, *_ in entries] == list(range(1, len(entries) + 1))
    assert "Lambdas" in {title for _, title, *_ in entries}
    assert f"Conversation: {answer.question.conversation_id}" in sources


@ask_db
def test_ask_into_a_pipe_prints_the_finalized_answer_once(corpus, asker, scripted) -> None:  # type: ignore[no-untyped-def]
    scripted.script = ["Lambda forms ", "are small [2]", " and quick [1]."]
    stdout, _ = run("ask", "What is a lambda expression?", "--user", "asker")
    assert stdout.startswith("Lambda forms are small [1] and quick [2].\nSources:\n  [1] ")
    assert stdout.count("Lambda forms") == 1
    assert "  [2] " in stdout


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(output: str, columns: int) -> list[str]:
    """What a terminal ``columns`` wide shows after ``output``: just the codes ``ask`` uses
    (carriage return, cursor up, clear to the end of the screen)."""
    rows: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(output):
        code = re.match(r"\x1b\[(\d*)([AJ])", output[i:])
        if code:
            if code[2] == "A":
                row -= int(code[1] or 1)
            else:
                del rows[row][col:]
                del rows[row + 1 :]
            i += code.end()
            continue
        ch = output[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
        else:
            if col == columns:
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line[col : col + 1] = [ch]
            col += 1
        while len(rows) <= row:
            rows.append([])
    return ["".join(line) for line in rows]


@ask_db
def test_ask_on_a_terminal_streams_then_replaces_with_the_finalized_answer(
    corpus, asker, scripted, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "16")  # the streamed text wraps over three rows
    scripted.script = ["Lambdas ", "are small [2]", " and quick [1]."]
    out = Terminal()
    call_command("ask", "What is a lambda expression?", "--user", "asker", stdout=out)
    output = out.getvalue()
    assert output.startswith("Lambdas are small [2] and quick [1].")  # streamed as written
    shown = screen(output, columns=16)
    assert "".join(shown[:3]) == "Lambdas are small [1] and quick [2]."  # one answer
    assert shown[3] == "Sources:"
    assert not any("[2] and" in row for row in shown)


@ask_db
def test_ask_writes_no_terminal_codes_a_model_sent(corpus, asker, scripted, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A model talked into it by a document could set the clipboard (OSC 52), clear the
    # screen or rewrite lines of the terminal that prints its answer.
    monkeypatch.setenv("COLUMNS", "80")
    scripted.script = ["Copy \x1b]52;c;ZXZpbA==\x07this", " \x1b[2J\rnow [1].\x9b"]
    for out in (Terminal(), io.StringIO()):
        call_command("ask", "What is a lambda expression?", "--user", "asker", stdout=out)
        output = out.getvalue()
        # Only ask's own codes (erase and rewrite the streamed answer) remain.
        assert not re.sub(r"\r?\x1b\[(?:\d+A\x1b\[)?J", "", output).count("\x1b"), output
        assert "\x07" not in output and "\x9b" not in output
        # Shown as escapes, not obeyed.
        assert "Copy \\x1b]52;c;ZXZpbA==\\x07this" in output


@ask_db
def test_ask_provider_failure_is_a_command_error_without_details(corpus, asker, settings) -> None:  # type: ignore[no-untyped-def]
    settings.ANSWERS = {**settings.ANSWERS, "PROVIDER": "tests.providers.ExplodingProvider"}
    with pytest.raises(CommandError) as excinfo:
        run("ask", "What is a lambda expression?", "--user", "asker")
    assert str(excinfo.value) == "The answer could not be generated. Please try again."
    assert Answer.objects.get(question__user=asker).status == Answer.Status.FAILED


@ask_db
def test_ask_prints_the_no_answer_message_off_topic(corpus, asker) -> None:  # type: ignore[no-untyped-def]
    stdout, _ = run("ask", "Who won the football world cup?", "--user", "asker")
    assert str(answers_settings.NO_ANSWER_MESSAGE) in stdout
    assert "Sources:\n  (none)\n" in stdout
    assert Answer.objects.get(question__user=asker).status == Answer.Status.NO_ANSWER


def test_ask_unknown_user_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="No user named 'ghost'"):
        run("ask", "What is a lambda expression?", "--user", "ghost")


@ask_db
def test_ask_without_permission_is_a_command_error(corpus, no_ask_user) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=r"^You do not have permission to ask questions\.$"):
        run("ask", "What is a lambda expression?", "--user", no_ask_user.username)
    assert not Answer.objects.exists()


def test_ask_blank_question_is_a_command_error(asker) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="question must not be blank"):
        run("ask", "   ", "--user", "asker")
    assert not Answer.objects.exists()


def test_ask_empty_user_is_a_command_error_not_the_first_superuser(asker) -> None:  # type: ignore[no-untyped-def]
    # `--user "$ASKER"` with the variable unset must not ask as a superuser, who sees every
    # document.
    get_user_model().objects.create_superuser(username="root", email="", password="x-pw-1")
    with pytest.raises(CommandError, match=r"^--user needs a name"):
        run("ask", "What is a lambda expression?", "--user", " ")
    assert not Answer.objects.exists()


# ------------------------------------------------------------------------- bootstrap


def test_bootstrap_loads_the_corpus_and_creates_a_working_login() -> None:
    Document.objects.all().delete()
    stdout, _ = run("bootstrap")
    assert "The corpus is empty" in stdout
    assert Document.objects.filter(source_key__startswith="python-docs:").count() == len(
        python_doc_topics()
    )
    assert Chunk.objects.exists()
    username = re.search(r"username: (\S+)", stdout)
    password = re.search(r"password: (\S+)", stdout)
    assert username is not None and password is not None
    assert username.group(1) == "admin"
    # Through the login page (login throttling needs a request: tests/security).
    client = Client()
    response = client.post("/accounts/login/", {"username": "admin", "password": password.group(1)})
    assert response.status_code == 302
    user = get_user_model().objects.get(pk=client.session["_auth_user_id"])
    assert user.is_staff and user.is_superuser

    stdout, _ = run("bootstrap")
    assert "password:" not in stdout  # never shown again (it says how to reset it)
    assert password.group(1) not in stdout
    assert "The corpus is empty" not in stdout
    assert "A staff login exists already." in stdout
    assert get_user_model().objects.filter(username="admin").count() == 1


def test_demo_topics_have_readable_titles_real_sections_and_distinct_texts() -> None:
    from answers.management.commands.ingest import TOPIC_PAGES

    topics = {topic.key: topic for topic in python_doc_topics()}
    assert topics["if"].title == "The if statement"
    assert topics["if"].url == "https://docs.python.org/3/reference/compound_stmts.html#if"
    assert topics["compound"].title == "Compound statements"
    assert topics["compound"].url.endswith("/reference/compound_stmts.html#compound")
    assert topics["lambda"].url.endswith("/reference/expressions.html#lambda")
    assert topics["typesseq"].url.endswith("/library/stdtypes.html#typesseq")
    # "else" is filed under the same text as "if": one document, so one excerpt.
    assert "else" not in topics
    assert len({t.text for t in topics.values()}) == len(topics)
    for topic in topics.values():
        assert topic.key in TOPIC_PAGES, f"{topic.key} has no page in the docs"
        assert '"' not in topic.title and "\u201c" not in topic.title
        assert (topic.title and topic.title != topic.key) or topic.key == "calls"


# -------------------------------------------------------------------- ingest --jobs


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """Enough HTML pages for several worker tasks, and one broken file among them."""
    from tests.test_ingest_workers import html_page

    root = tmp_path / "site"
    for index in range(50):
        write(root / f"page{index:03d}.html", html_page(index))
    write(root / "page025-broken.html", b"\x00\x00 \n")
    return root


def stored(root: Path) -> dict[str, tuple[str, str, list[tuple[int, int, str]]]]:
    prefix = str(root.resolve())
    return {
        d.source_key: (
            d.title,
            d.content_hash,
            list(d.chunks.order_by("ordinal").values_list("start", "end", "text")),
        )
        for d in Document.objects.filter(source_key__startswith=prefix)
    }


def test_ingest_with_two_jobs_stores_what_one_job_stores(site: Path) -> None:
    stdout, stderr = run("ingest", str(site), "--jobs", "1")
    one = stored(site)
    first = summary(stdout)
    Document.objects.all().delete()
    stdout, stderr_two = run("ingest", str(site), "--jobs", "2")
    assert summary(stdout) == first
    assert stored(site) == one
    assert first["created"] == 50 and first["failed"] == 1
    assert first["chunks"] == Chunk.objects.count() > 100
    for err in (stderr, stderr_two):
        (line,) = err.strip().splitlines()
        assert line.startswith(f"Skipped {(site / 'page025-broken.html').resolve()}: ")


def test_ingest_with_jobs_again_skips_unchanged_files(site: Path) -> None:
    run("ingest", str(site), "--jobs", "2")
    before = stored(site)
    chunk_ids = set(Chunk.objects.values_list("pk", flat=True))
    write(site / "page007.html", "<html><title>Page 7</title><main>Quokkas now.</main></html>")
    stdout, _ = run("ingest", str(site), "--jobs", "2")
    counts = summary(stdout)
    assert (counts["created"], counts["updated"], counts["unchanged"]) == (0, 1, 49)
    assert counts["chunks"] == 1
    after = stored(site)
    changed = str((site / "page007.html").resolve())
    assert after[changed][2] == [(0, 12, "Quokkas now.")]
    assert {k: v for k, v in after.items() if k != changed} == {
        k: v for k, v in before.items() if k != changed
    }
    assert len(chunk_ids - set(Chunk.objects.values_list("pk", flat=True))) == len(
        before[changed][2]
    )


def test_ingest_jobs_must_be_positive(site: Path) -> None:
    with pytest.raises(CommandError, match="--jobs must be at least 1"):
        run("ingest", str(site), "--jobs", "0")


def test_ingest_without_worker_processes_says_so_and_ingests_everything(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from answers import ingest_workers

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(38, "Function not implemented")

    # The edge we do not own: the OS refusing processes (a sandbox, no /dev/shm).
    monkeypatch.setattr(ingest_workers, "ProcessPoolExecutor", refuse)
    stdout, stderr = run("ingest", str(site), "--jobs", "2")
    counts = summary(stdout)
    assert (counts["created"], counts["failed"]) == (50, 1)
    lines = stderr.strip().splitlines()
    assert lines[0] == (
        "Ingest: cannot start 2 worker processes ([Errno 38] Function not implemented); "
        "parsing the remaining files in this process."
    )
    assert len(lines) == 2 and lines[1].startswith("Skipped ")


def test_ingest_reports_a_file_that_crashes_its_worker_and_ingests_the_rest(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from answers import ingest_workers

    command = os.getpid()
    real_extract = ingest_workers.extract_file

    def extract(path: Path) -> object:
        # The edge we do not own: a native parser (PDFium) that segfaults on one file.
        if path.name == "page010.html":
            if os.getpid() == command:
                raise RuntimeError("parsed in the command's process, which it would kill")
            os.kill(os.getpid(), signal.SIGSEGV)
        return real_extract(path)

    monkeypatch.setattr(ingest_workers, "extract_file", extract)
    stdout, stderr = run("ingest", str(site), "--jobs", "2", "--no-progress")
    counts = summary(stdout)
    assert (counts["created"], counts["failed"]) == (49, 2)
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("Ingest: a worker process stopped (BrokenProcessPool: ")
    crashed = f"Skipped {(site / 'page010.html').resolve()}: its parser crashed (BrokenProcessPool"
    assert any(line.startswith(crashed) for line in lines[1:]), lines
    assert len(lines) == 3


def _manage(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``manage.py ARGS`` in a process group of its own, on the test database, with SIGINT
    at its default (as a shell's foreground job gets it: a background job ignores it)."""
    database = connections["default"].settings_dict
    env = {
        **os.environ,
        **(env or {}),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(database),
        "ANSWERS_TEST_DB": str(database["NAME"]),
        "PYTHONPATH": str(REPO_ROOT),
    }

    def foreground() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "manage.py", *args], cwd=REPO_ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=foreground,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_during_a_parallel_ingest_stops_cleanly_and_the_next_run_completes_it(
    tmp_path: Path,
) -> None:
    root = tmp_path / "many"
    words = ["wombat", "numbat", "quoll", "bilby", "echidna", "platypus"]
    for index in range(3000):
        paragraphs = (" ".join(words[(index + n) % 6] for n in range(k, k + 90)) for k in range(8))
        write(root / f"doc{index:04d}.md", f"# Note {index}\n\n" + "\n\n".join(paragraphs))
    process = _manage("ingest", str(root), "--jobs", "2", "--no-progress")
    # Ctrl-C (SIGINT to the whole foreground group: the command and its workers) once the
    # first batch is written, long before the last.
    while not Document.objects.filter(source_key__startswith=str(root)).exists():
        assert process.poll() is None, process.communicate()
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    written = Document.objects.filter(source_key__startswith=str(root)).count()
    assert 0 < written < 3000
    (line,) = [line for line in stderr.splitlines() if "Interrupted" in line]
    assert f"{written} document(s) stored so far" in line
    assert "run the same command again" in line
    assert_chunk_counts_stored()  # no document half-written

    stdout, _ = run("ingest", str(root))
    counts = summary(stdout)
    assert (counts["unchanged"], counts["created"], counts["failed"]) == (
        written,
        3000 - written,
        0,
    )
    assert Document.objects.filter(source_key__startswith=str(root)).count() == 3000
    assert_chunk_counts_stored()


def test_ctrl_c_while_the_folders_are_walked_is_a_command_error_without_a_traceback(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large tree takes seconds to walk; Ctrl-C then came out as a KeyboardInterrupt
    # traceback. The OS edge: SIGINT arrives while a folder is listed.
    def interrupted(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "scandir", interrupted)
    with pytest.raises(CommandError) as excinfo:
        run("ingest", str(folder), "--group", "research")
    assert excinfo.value.returncode == 130
    assert str(excinfo.value).startswith("Interrupted: 0 document(s) stored so far")
    assert not ingested(folder)
    assert not Group.objects.filter(name="research").exists()


@ask_db
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; `timeout`
def test_ctrl_c_during_ask_keeps_the_answer_as_interrupted_and_prints_it(
    corpus, asker, stop
) -> None:  # type: ignore[no-untyped-def]
    # The extractive provider paced so the answer is still streaming when Ctrl-C comes.
    process = _manage(
        "ask", "What is a lambda expression?", "--user", "asker",
        env={"ANSWERS_EXTRACTIVE_DELAY": "0.3"},
    )  # fmt: skip
    while not Answer.objects.filter(question__user=asker).exists():
        assert process.poll() is None, process.communicate()
    os.killpg(process.pid, stop)
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 128 + stop, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    answer = Answer.objects.get(question__user=asker)
    assert answer.status == Answer.Status.INTERRUPTED  # as the page's Stop stores it
    assert stderr.strip().splitlines()[-1] == (
        f"CommandError: Stopped: the answer so far is kept as interrupted "
        f"(conversation {answer.question.conversation_id})."
    )
    # What was kept, with its Sources, as a finished answer prints.
    text, sources = stdout.split("Sources:\n", 1)
    assert text.strip() == answer.final_text.strip()
    assert sources.startswith("  ")


@ask_db
def test_ask_shows_control_characters_of_documents_escaped_not_obeyed(asker) -> None:  # type: ignore[no-untyped-def]
    # A document's title and text holding terminal codes: clear the screen, retitle the
    # window, colour. Printed raw, they acted on the reader's terminal.
    services.document_ingest(
        source_key="/docs/platypus.md",
        title="Platypus \x1b]0;owned\x07guide",
        body="The platypus lays eggs \x1b[2J and swims in rivers with its venom spurs.",
        chunk_size=int(answers_settings.CHUNK_SIZE),
    )
    for out in (io.StringIO(), Terminal()):
        call_command("ask", "Does the platypus lay eggs?", "--user", "asker", stdout=out)
        output = out.getvalue()
        assert "\x1b]" not in output and "\x1b[2J" not in output and "\x07" not in output
        assert "lays eggs \\x1b[2J and swims" in output
        assert "  [1] Platypus \\x1b]0;owned\\x07guide (" in output


def test_a_folder_that_cannot_be_listed_is_reported_not_skipped_in_silence(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = folder / "locked"
    write(locked / "inside.md", "# Inside\n\nNever read.\n")
    lock_folder(locked, monkeypatch)

    stdout, stderr = run("ingest", str(folder))
    counts = summary(stdout)
    assert (counts["created"], counts["failed"]) == (5, 1)
    assert stderr.strip().splitlines() == [
        f"Skipped {locked.resolve()}: cannot list this folder (Permission denied)"
    ]


def test_a_path_that_cannot_be_reached_is_not_called_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = write(tmp_path / "locked" / "inside.md", "# Inside\n\nNever read.\n")
    other = write(tmp_path / "other.md", "# Other\n\nThe other file is about numbats.\n")
    lock_folder(tmp_path / "locked", monkeypatch)

    stdout, stderr = run("ingest", str(inside), str(other))
    counts = summary(stdout)
    assert (counts["created"], counts["failed"]) == (1, 1)
    assert stderr.strip().splitlines() == [f"Skipped {inside}: cannot read it (Permission denied)"]
    with pytest.raises(CommandError, match=r"^Every file failed to ingest\.$"):
        run("ingest", str(tmp_path / "locked"))


@pytest.mark.parametrize(
    ("username", "says"),
    [
        ("", "--username needs a name"),
        ("two words", "--username 'two words' is not a valid username"),
        ("u" * 151, "is not a valid username"),
    ],
)
def test_bootstrap_refuses_a_username_it_cannot_create(username: str, says: str) -> None:
    # Without a staff login it creates one: an empty name was a ValueError traceback, one
    # with a space or too long a login nobody could use (or a database error on PostgreSQL).
    assert not get_user_model().objects.filter(is_staff=True).exists()
    with pytest.raises(CommandError, match=re.escape(says)):
        run("bootstrap", "--username", username)
    assert not get_user_model().objects.exists()
