"""Chunks' search vectors kept in the row, not in the TOAST table (ADR 0027).

Does nothing on databases other than PostgreSQL. A chunk's row (its text and its vector,
about 1.1 kB each) is over PostgreSQL's 2 kB TOAST threshold, and with both columns
``EXTENDED`` about half the vectors were moved out of line: every search then fetched each
candidate's vector from the TOAST table (its index and a chunk of it) for every function
that read it. ``STORAGE MAIN`` makes the text go out first (compressed, then out of line)
and keeps the vector in the row (compressed in the row only if the row is still too big,
out of line only as a last resort), so the search reads it in place.

The setting applies to rows written afterwards; the existing vectors are rewritten once
(the same value, re-stored), with the statistics ledger's update trigger off: no chunk's
lexemes change, so it would add nothing but the work of two transition tables. It
rewrites every chunk row once (about 30 s per 100k chunks on a 2-core machine) and leaves
the old versions as dead rows for VACUUM (autovacuum, or ``VACUUM answers_chunk`` where it
is off).
"""

from __future__ import annotations

from django.db import migrations

FORWARD = [
    # ALTER TABLE refuses a table with deferred foreign-key checks pending (chunks written
    # earlier in the same transaction, as in a test): run them now.
    "SET CONSTRAINTS ALL IMMEDIATE",
    "ALTER TABLE answers_chunk ALTER COLUMN search_vector SET STORAGE MAIN",
    "ALTER TABLE answers_chunk DISABLE TRIGGER answers_search_stats_update",
    # A new value (concatenated with an empty vector), so the row stores it afresh.
    "UPDATE answers_chunk SET search_vector = search_vector || ''::tsvector",
    "ALTER TABLE answers_chunk ENABLE TRIGGER answers_search_stats_update",
    "SET CONSTRAINTS ALL DEFERRED",
]
# The vectors already in rows stay there (a later write re-stores them as EXTENDED).
BACKWARD = [
    "SET CONSTRAINTS ALL IMMEDIATE",
    "ALTER TABLE answers_chunk ALTER COLUMN search_vector SET STORAGE EXTENDED",
    "SET CONSTRAINTS ALL DEFERRED",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0012_document_near_signature")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
