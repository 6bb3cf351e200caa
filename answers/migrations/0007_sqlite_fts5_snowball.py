"""Snowball stemming in the FTS5 index (ADR 0013): the index is rebuilt from the chunks.

The ``porter`` tokenizer is replaced by text stemmed in Python (``answers_stem``, the
SQL function ``answers.search.stemming`` registers on each connection): the triggers of
migration 0006 are recreated to index ``answers_stem(title)`` and ``answers_stem(text)``,
and every existing chunk is indexed again, with its length in tokens. Reversing restores
the porter index and 0006's triggers. Does nothing on databases other than SQLite
(PostgreSQL's configuration is Snowball already).
"""

from __future__ import annotations

import importlib

from django.db import migrations

fts5 = importlib.import_module("answers.migrations.0002_sqlite_fts5")
scoped = importlib.import_module("answers.migrations.0006_scoped_search")

_CREATE = """
CREATE VIRTUAL TABLE answers_chunk_fts USING fts5(
    title, text, tokenize = 'unicode61 remove_diacritics 2'
)
"""
_DROP = [
    *(f"DROP TRIGGER IF EXISTS {name}" for name in scoped._TRIGGERS),
    "DROP TABLE IF EXISTS answers_chunk_fts_vocab",
    "DROP TABLE IF EXISTS answers_chunk_fts",
    "DELETE FROM answers_chunk_fts_length",
]
_SETUP = [s for s in fts5.FORWARD if "'rank'" in s or "fts5vocab" in s]
_PORTER_TRIGGERS = [s for s in scoped.FORWARD if "CREATE TRIGGER" in s]
_STEMMED = {
    "VALUES (new.id, (SELECT title FROM answers_document WHERE id = new.document_id), new.text)": (
        "VALUES (new.id, answers_stem((SELECT title FROM answers_document "
        "WHERE id = new.document_id)), answers_stem(new.text))"
    ),
    "SELECT id, new.title, text FROM answers_chunk": (
        "SELECT id, answers_stem(new.title), answers_stem(text) FROM answers_chunk"
    ),
}


def _stemmed(statement: str) -> str:
    for porter, snowball in _STEMMED.items():
        statement = statement.replace(porter, snowball)
    return statement


_TRIGGERS = [_stemmed(s) for s in _PORTER_TRIGGERS]
assert all("answers_stem" in s for s in _TRIGGERS if "INSERT INTO answers_chunk_fts(" in s)

_LENGTHS = scoped._copy("1").rstrip(";")
FORWARD = [
    *_DROP,
    _CREATE,
    *_SETUP,
    *_TRIGGERS,
    """
    INSERT INTO answers_chunk_fts(rowid, title, text)
    SELECT c.id, answers_stem(d.title), answers_stem(c.text)
    FROM answers_chunk c JOIN answers_document d ON d.id = c.document_id
    """,
    _LENGTHS,
]
BACKWARD = [
    *_DROP,
    next(s for s in fts5.FORWARD if "CREATE VIRTUAL TABLE answers_chunk_fts " in s),
    *_SETUP,
    *_PORTER_TRIGGERS,
    next(s for s in fts5.FORWARD if "SELECT c.id, d.title, c.text" in s),
    _LENGTHS,
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0006_scoped_search")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
