"""The embedded search index: FTS5 over chunk text and document title, kept by triggers.

Does nothing on databases other than SQLite (they have their own backend).
"""

from __future__ import annotations

from django.db import migrations

FORWARD = [
    """
    CREATE VIRTUAL TABLE answers_chunk_fts USING fts5(
        title, text, tokenize = 'porter unicode61 remove_diacritics 2'
    )
    """,
    # Title matches count double: a topic's name says what the whole document is about.
    "INSERT INTO answers_chunk_fts(answers_chunk_fts, rank) VALUES ('rank', 'bm25(2.0, 1.0)')",
    "CREATE VIRTUAL TABLE answers_chunk_fts_vocab USING fts5vocab(answers_chunk_fts, row)",
    """
    CREATE TRIGGER answers_chunk_fts_insert AFTER INSERT ON answers_chunk BEGIN
        INSERT INTO answers_chunk_fts(rowid, title, text)
        VALUES (new.id, (SELECT title FROM answers_document WHERE id = new.document_id), new.text);
    END
    """,
    """
    CREATE TRIGGER answers_chunk_fts_delete AFTER DELETE ON answers_chunk BEGIN
        DELETE FROM answers_chunk_fts WHERE rowid = old.id;
    END
    """,
    """
    CREATE TRIGGER answers_chunk_fts_update AFTER UPDATE OF text, document_id ON answers_chunk
    BEGIN
        DELETE FROM answers_chunk_fts WHERE rowid = old.id;
        INSERT INTO answers_chunk_fts(rowid, title, text)
        VALUES (new.id, (SELECT title FROM answers_document WHERE id = new.document_id), new.text);
    END
    """,
    """
    CREATE TRIGGER answers_document_fts_title AFTER UPDATE OF title ON answers_document
    BEGIN
        DELETE FROM answers_chunk_fts
        WHERE rowid IN (SELECT id FROM answers_chunk WHERE document_id = new.id);
        INSERT INTO answers_chunk_fts(rowid, title, text)
        SELECT id, new.title, text FROM answers_chunk WHERE document_id = new.id;
    END
    """,
    # Chunks that existed before this migration.
    """
    INSERT INTO answers_chunk_fts(rowid, title, text)
    SELECT c.id, d.title, c.text FROM answers_chunk c JOIN answers_document d ON d.id = c.document_id
    """,
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS answers_document_fts_title",
    "DROP TRIGGER IF EXISTS answers_chunk_fts_update",
    "DROP TRIGGER IF EXISTS answers_chunk_fts_delete",
    "DROP TRIGGER IF EXISTS answers_chunk_fts_insert",
    "DROP TABLE IF EXISTS answers_chunk_fts_vocab",
    "DROP TABLE IF EXISTS answers_chunk_fts",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0001_initial")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
