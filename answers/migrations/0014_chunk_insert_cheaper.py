"""Less work per chunk written (issue 17: ingest throughput on PostgreSQL).

- The chunk's document index: the unique ``(document_id, ordinal)`` index already serves
  every lookup by document (its leading column), so the separate ``document_id`` index
  Django made for the foreign key was one more B-tree written per chunk, read by nothing.
- PostgreSQL only: ``answers_chunk_search_length`` (B-tree on ``search_length``) served the
  per-query count and average length; since migration 0011 they come from the statistics
  ledger, so the index is only written, never read.
- PostgreSQL only: the fill trigger computes the vector and its length in one statement
  (one executor run per chunk instead of two: the title lookup and the length's unnest were
  separate queries; ``OFFSET 0`` keeps the planner from inlining the vector into each of
  its two uses, which computed it twice: 0.6x the ingest throughput). The same vector and
  length as before, bit for bit.
"""

from __future__ import annotations

from django.db import migrations, models

FILL_ONE_STATEMENT = """
CREATE OR REPLACE FUNCTION answers_chunk_search_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT x.v, (SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest(x.v))
    INTO NEW.search_vector, NEW.search_length
    FROM (
        SELECT setweight(to_tsvector('answers_english', answers_search_clean(coalesce(
                   (SELECT title FROM answers_document WHERE id = NEW.document_id), ''
               ))), 'A')
               || setweight(to_tsvector('answers_english', answers_search_clean(NEW.text)), 'B')
               AS v
        OFFSET 0  -- computed once: a subquery pulled up would compute v for each use
    ) AS x;
    RETURN NEW;
END
$$
"""
# Migration 0004's function, as it was.
FILL_TWO_STATEMENTS = """
CREATE OR REPLACE FUNCTION answers_chunk_search_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_vector :=
        setweight(to_tsvector('answers_english', answers_search_clean(coalesce(
            (SELECT title FROM answers_document WHERE id = NEW.document_id), ''
        ))), 'A')
        || setweight(to_tsvector('answers_english', answers_search_clean(NEW.text)), 'B');
    NEW.search_length := (
        SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest(NEW.search_vector)
    );
    RETURN NEW;
END
$$
"""
FORWARD = [
    "DROP INDEX IF EXISTS answers_chunk_search_length",
    FILL_ONE_STATEMENT,
]
BACKWARD = [
    FILL_TWO_STATEMENTS,
    "CREATE INDEX IF NOT EXISTS answers_chunk_search_length ON answers_chunk (search_length)",
]


def _drop_document_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Drop the index on ``document_id`` alone, by what it indexes, not by its name (on
    SQLite an ``AlterField`` would rebuild the table, and with it drop the FTS5 triggers)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "answers_chunk")
    for name, info in constraints.items():
        if info["index"] and not info["unique"] and info["columns"] == ["document_id"]:
            schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")


def _add_document_index(apps, schema_editor):  # type: ignore[no-untyped-def]
    schema_editor.execute(
        "CREATE INDEX answers_chunk_document_id_5abe384e ON answers_chunk (document_id)"
    )


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0013_postgres_search_vector_inline")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="chunk",
                    name="document",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="chunks",
                        to="answers.document",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(_drop_document_index, _add_document_index, elidable=False)
            ],
        ),
        migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False),
    ]
