"""Scoped search (ADR 0009): an index on ``Document.access``, and on SQLite each chunk's
length in tokens as FTS5's ``bm25()`` reads it (title + text), kept by the index triggers.

FTS5 keeps those lengths in its docsize table as varint blobs; the scoped search needs
them as integers for every matching chunk, so the triggers of migration 0002 are
recreated to copy them into ``answers_chunk_fts_length`` after each write to the index.
"""

from __future__ import annotations

import importlib

from django.db import migrations, models

fts5 = importlib.import_module("answers.migrations.0002_sqlite_fts5")

# Every byte value in order: instr() on blobs reads a byte's value (no unhex() in 3.40).
_ALL_BYTES = "X'" + bytes(range(256)).hex().upper() + "'"


def _byte(k: int) -> str:
    return f"(instr({_ALL_BYTES}, substr(sz, {k}, 1)) - 1)"


def _varint(k: int) -> tuple[str, str]:
    """The value and byte length of the varint at byte ``k`` of ``sz`` (up to 3 bytes:
    a column of up to 2,097,151 tokens, far beyond any chunk)."""
    b0, b1, b2 = _byte(k), _byte(k + 1), _byte(k + 2)
    value = (
        f"(CASE WHEN {b0} < 128 THEN {b0} WHEN {b1} < 128 THEN ({b0} - 128) * 128 + {b1}"
        f" ELSE ({b0} - 128) * 16384 + ({b1} - 128) * 128 + {b2} END)"
    )
    return value, f"(CASE WHEN {b0} < 128 THEN 1 WHEN {b1} < 128 THEN 2 ELSE 3 END)"


def _tokens() -> str:
    """A row's tokens over both columns (title, text) from its docsize blob ``sz``."""
    title, title_length = _varint(1)
    texts = " ".join(f"WHEN {n} THEN {_varint(1 + n)[0]}" for n in (1, 2))
    return f"({title} + CASE {title_length} {texts} ELSE {_varint(4)[0]} END)"


def _copy(where: str) -> str:
    return (
        "INSERT OR REPLACE INTO answers_chunk_fts_length(id, tokens) "
        f"SELECT id, {_tokens()} FROM answers_chunk_fts_docsize WHERE {where};"
    )


_TRIGGERS = [
    "answers_document_fts_title",
    "answers_chunk_fts_update",
    "answers_chunk_fts_delete",
    "answers_chunk_fts_insert",
]

FORWARD = [
    "CREATE TABLE answers_chunk_fts_length (id INTEGER PRIMARY KEY, tokens INTEGER NOT NULL)",
    *(f"DROP TRIGGER IF EXISTS {name}" for name in _TRIGGERS),
    f"""
    CREATE TRIGGER answers_chunk_fts_insert AFTER INSERT ON answers_chunk BEGIN
        INSERT INTO answers_chunk_fts(rowid, title, text)
        VALUES (new.id, (SELECT title FROM answers_document WHERE id = new.document_id), new.text);
        {_copy("id = new.id")}
    END
    """,
    """
    CREATE TRIGGER answers_chunk_fts_delete AFTER DELETE ON answers_chunk BEGIN
        DELETE FROM answers_chunk_fts WHERE rowid = old.id;
        DELETE FROM answers_chunk_fts_length WHERE id = old.id;
    END
    """,
    f"""
    CREATE TRIGGER answers_chunk_fts_update AFTER UPDATE OF text, document_id ON answers_chunk
    BEGIN
        DELETE FROM answers_chunk_fts WHERE rowid = old.id;
        DELETE FROM answers_chunk_fts_length WHERE id = old.id;
        INSERT INTO answers_chunk_fts(rowid, title, text)
        VALUES (new.id, (SELECT title FROM answers_document WHERE id = new.document_id), new.text);
        {_copy("id = new.id")}
    END
    """,
    f"""
    CREATE TRIGGER answers_document_fts_title AFTER UPDATE OF title ON answers_document
    BEGIN
        DELETE FROM answers_chunk_fts
        WHERE rowid IN (SELECT id FROM answers_chunk WHERE document_id = new.id);
        INSERT INTO answers_chunk_fts(rowid, title, text)
        SELECT id, new.title, text FROM answers_chunk WHERE document_id = new.id;
        {_copy("id IN (SELECT id FROM answers_chunk WHERE document_id = new.id)")}
    END
    """,
    # Chunks indexed before this migration.
    _copy("1").rstrip(";"),
]

BACKWARD = [
    *(f"DROP TRIGGER IF EXISTS {name}" for name in _TRIGGERS),
    # Migration 0002's own triggers, as they were.
    *(statement for statement in fts5.FORWARD if "CREATE TRIGGER" in statement),
    "DROP TABLE IF EXISTS answers_chunk_fts_length",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0005_answer_review_all_answers"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="document",
            index=models.Index(fields=["access"], name="answers_document_access"),
        ),
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False),
    ]
