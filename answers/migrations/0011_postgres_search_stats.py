"""PostgreSQL search statistics kept by the index, not counted per query (ADR 0027).

Does nothing on databases other than PostgreSQL (FTS5 keeps its own: its vocabulary and
totals). ``answers_search_stats`` holds, per lexeme, how many chunks hold it (``chunks``),
and for the lexeme ``''`` (no real lexeme is empty) the chunk count and the sum of
``search_length`` (``tokens``): BM25's n, N and N * avgdl.

It is an append-only ledger: a lexeme's figure is the SUM of its rows. Statement-level
triggers on ``answers_chunk`` (transition tables: one aggregate per INSERT, UPDATE or
DELETE statement, so a bulk insert of 500 chunks adds one row per distinct lexeme, not
one per chunk) append the statement's deltas; no ingest ever updates a row another one
writes, so concurrent ingests never wait on a common word's row. Every ``FOLD_EVERY``-th
writing statement (numbered by a sequence) then folds the rows of the lexemes it touched
into one, but only if it wins ``pg_try_advisory_xact_lock`` (one folder at a time, nobody
waits: a busy lock means a later statement folds). Readers sum the rows in one statement, so they see exact
figures as of their snapshot; folding only bounds how many rows a lexeme has.
A TRUNCATE of the chunks empties it. Existing chunks are counted once here.
"""

from __future__ import annotations

from django.db import migrations

# The deltas of the rows in ``{rows}`` (a transition table) times ``{sign}``: SQL text.
_DELTAS = """
    SELECT '' AS lexeme, {sign} * count(*) AS chunks,
           {sign} * coalesce(sum(search_length), 0) AS tokens
    FROM {rows}
    UNION ALL
    SELECT l.lexeme, {sign} * count(*), 0
    FROM {rows} AS r CROSS JOIN LATERAL unnest(tsvector_to_array(r.search_vector)) AS l(lexeme)
    GROUP BY l.lexeme
"""

# Append the net deltas, then fold the touched lexemes' rows if no one else is folding.
_BODY = """
DECLARE
    touched text[];
BEGIN
    WITH d AS (
        SELECT lexeme, sum(chunks) AS chunks, sum(tokens) AS tokens
        FROM ({deltas}) AS x
        GROUP BY lexeme
        HAVING sum(chunks) <> 0 OR sum(tokens) <> 0
    ), added AS (
        INSERT INTO answers_search_stats (lexeme, chunks, tokens)
        SELECT lexeme, chunks, tokens FROM d
        RETURNING lexeme
    )
    SELECT array_agg(lexeme) INTO touched FROM added;
    -- Nested, so the sequence counts only statements that wrote rows, and the lock is
    -- only tried by a folding statement.
    IF touched IS NOT NULL THEN
        IF mod(nextval('answers_search_stats_statements'), {fold_every}) = 0 THEN
            IF pg_try_advisory_xact_lock(hashtext('answers_search_stats')) THEN
                WITH gone AS (
                    DELETE FROM answers_search_stats
                    WHERE lexeme = ANY(touched) AND lexeme IN (
                        SELECT lexeme FROM answers_search_stats
                        WHERE lexeme = ANY(touched) GROUP BY lexeme HAVING count(*) > 1
                    )
                    RETURNING lexeme, chunks, tokens
                )
                INSERT INTO answers_search_stats (lexeme, chunks, tokens)
                SELECT lexeme, sum(chunks), sum(tokens) FROM gone
                GROUP BY lexeme HAVING sum(chunks) <> 0 OR sum(tokens) <> 0;
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
"""

# Every FOLD_EVERY-th writing statement folds (the others only append): a lexeme written
# by every statement (a common word) keeps at most about this many rows.
FOLD_EVERY = 8

_EVENTS = {
    # trigger suffix: (event, REFERENCING clause, deltas)
    "insert": (
        "INSERT",
        "NEW TABLE AS new_rows",
        _DELTAS.format(sign="1", rows="new_rows"),
    ),
    "delete": (
        "DELETE",
        "OLD TABLE AS old_rows",
        _DELTAS.format(sign="-1", rows="old_rows"),
    ),
    "update": (
        "UPDATE",
        "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        _DELTAS.format(sign="-1", rows="old_rows")
        + " UNION ALL "
        + _DELTAS.format(sign="1", rows="new_rows"),
    ),
}


def _forward() -> list[str]:
    statements = [
        """
        CREATE TABLE answers_search_stats (
            lexeme text NOT NULL,
            chunks bigint NOT NULL,
            tokens bigint NOT NULL DEFAULT 0
        )
        """,
        "CREATE INDEX answers_search_stats_lexeme ON answers_search_stats (lexeme)",
        # Numbers the writing statements (a sequence: no lock, no row shared by ingests).
        "CREATE SEQUENCE answers_search_stats_statements",
    ]
    for suffix, (event, referencing, deltas) in _EVENTS.items():
        statements += [
            f"""
            CREATE FUNCTION answers_search_stats_{suffix}() RETURNS trigger
            LANGUAGE plpgsql AS $$ {_BODY.format(deltas=deltas, fold_every=FOLD_EVERY)} $$
            """,
            f"""
            CREATE TRIGGER answers_search_stats_{suffix}
            AFTER {event} ON answers_chunk REFERENCING {referencing}
            FOR EACH STATEMENT EXECUTE FUNCTION answers_search_stats_{suffix}()
            """,
        ]
    statements += [
        """
        CREATE FUNCTION answers_search_stats_truncate() RETURNS trigger
        LANGUAGE plpgsql AS $$ BEGIN DELETE FROM answers_search_stats; RETURN NULL; END $$
        """,
        """
        CREATE TRIGGER answers_search_stats_truncate AFTER TRUNCATE ON answers_chunk
        FOR EACH STATEMENT EXECUTE FUNCTION answers_search_stats_truncate()
        """,
        # The chunks that exist already, counted once.
        "INSERT INTO answers_search_stats (lexeme, chunks, tokens) "  # noqa: S608 (constant)
        f"SELECT lexeme, chunks, tokens FROM ({_DELTAS.format(sign='1', rows='answers_chunk')}) d "
        "WHERE chunks <> 0 OR tokens <> 0",
    ]
    return statements


FORWARD = _forward()
BACKWARD = [
    *(
        f"DROP TRIGGER IF EXISTS answers_search_stats_{suffix} ON answers_chunk"
        for suffix in [*_EVENTS, "truncate"]
    ),
    *(
        f"DROP FUNCTION IF EXISTS answers_search_stats_{suffix}()"
        for suffix in [*_EVENTS, "truncate"]
    ),
    "DROP TABLE IF EXISTS answers_search_stats",
    "DROP SEQUENCE IF EXISTS answers_search_stats_statements",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0010_citation_support")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
