"""The PostgreSQL search index: a weighted tsvector on each chunk, kept by triggers.

Does nothing on databases other than PostgreSQL (SQLite has its FTS5 index, 0002). The
columns are raw SQL, not model fields, so SQLite never gets them (as with FTS5's table).

- ``answers_search_clean(text)`` turns every run of non-letters-or-digits into one space,
  so PostgreSQL's parser sees the tokens FTS5's unicode61 and ``query_terms()`` see
  (otherwise ``os.path.join`` is one "file" token that never matches ``os``/``path``).
  ``[[:alnum:]]`` follows the database's LC_CTYPE: use a UTF-8 locale, or non-ASCII letters
  become separators.
- ``answers_english``: the english configuration, but its words go to a snowball english
  dictionary without a stop-word list: FTS5 keeps every word, and the app's own short list
  keeps code keywords ("with", "for", "is", "not", "in") on purpose.
- ``search_vector``: title (weight A, counted twice by the backend) || text (weight B);
  ``search_length``: its number of token positions, the BM25 document length.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = [
    """
    CREATE TEXT SEARCH DICTIONARY answers_english_stem (
        TEMPLATE = pg_catalog.snowball, LANGUAGE = english
    )
    """,
    "CREATE TEXT SEARCH CONFIGURATION answers_english (COPY = pg_catalog.english)",
    # Every kind of word the parser can see in cleaned text is stemmed (no stop words);
    # numbers keep english's own mapping (simple: lower-cased, never stemmed).
    """
    ALTER TEXT SEARCH CONFIGURATION answers_english
        ALTER MAPPING FOR asciiword, word, numword, asciihword, hword, numhword,
                          hword_asciipart, hword_part, hword_numpart
        WITH answers_english_stem
    """,
    """
    CREATE FUNCTION answers_search_clean(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT
    AS $$ SELECT regexp_replace(value, '[^[:alnum:]]+', ' ', 'g') $$
    """,
    "ALTER TABLE answers_chunk ADD COLUMN search_vector tsvector",
    "ALTER TABLE answers_chunk ADD COLUMN search_length integer NOT NULL DEFAULT 0",
    """
    CREATE FUNCTION answers_chunk_search_fill() RETURNS trigger
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
    """,
    """
    CREATE TRIGGER answers_chunk_search_fill
    BEFORE INSERT OR UPDATE OF text, document_id ON answers_chunk
    FOR EACH ROW EXECUTE FUNCTION answers_chunk_search_fill()
    """,
    # A renamed document re-touches its chunks, whose trigger reads the new title.
    """
    CREATE FUNCTION answers_document_search_title() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE answers_chunk SET text = text WHERE document_id = NEW.id;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER answers_document_search_title
    AFTER UPDATE OF title ON answers_document
    FOR EACH ROW WHEN (OLD.title IS DISTINCT FROM NEW.title)
    EXECUTE FUNCTION answers_document_search_title()
    """,
    # Chunks that existed before this migration.
    "UPDATE answers_chunk SET text = text",
    "CREATE INDEX answers_chunk_search_vector ON answers_chunk USING gin (search_vector)",
    # Every search needs the chunk count and average length; this index answers both with
    # an index-only scan instead of reading every chunk's text and vector.
    "CREATE INDEX answers_chunk_search_length ON answers_chunk (search_length)",
]

BACKWARD = [
    "DROP TRIGGER IF EXISTS answers_document_search_title ON answers_document",
    "DROP FUNCTION IF EXISTS answers_document_search_title()",
    "DROP TRIGGER IF EXISTS answers_chunk_search_fill ON answers_chunk",
    "DROP FUNCTION IF EXISTS answers_chunk_search_fill()",
    "DROP INDEX IF EXISTS answers_chunk_search_length",
    "DROP INDEX IF EXISTS answers_chunk_search_vector",
    "ALTER TABLE answers_chunk DROP COLUMN IF EXISTS search_length",
    "ALTER TABLE answers_chunk DROP COLUMN IF EXISTS search_vector",
    "DROP FUNCTION IF EXISTS answers_search_clean(text)",
    "DROP TEXT SEARCH CONFIGURATION IF EXISTS answers_english",
    "DROP TEXT SEARCH DICTIONARY IF EXISTS answers_english_stem",
]


def _run(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("answers", "0003_answer_usage")]

    operations = [migrations.RunPython(_run(FORWARD), _run(BACKWARD), elidable=False)]
