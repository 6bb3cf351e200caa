"""``answers/migrations``: what a migration leaves in the database, and that it reverses."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db

# Migration 0017: the foreign keys whose own index went (another index leads with them).
LED = [
    ("answers_feedback", "answer_id"),
    ("answers_question", "conversation_id"),
    ("answers_question", "user_id"),
    ("answers_retrievedsource", "question_id"),
]


def _indexes(table: str) -> list[list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [info["columns"] for info in constraints.values() if info["index"]]


def _migrate(target: str | None) -> None:
    """To ``target``, or to the latest migration when None."""
    executor = MigrationExecutor(connection)
    leaf = executor.loader.graph.leaf_nodes("answers")
    executor.migrate([("answers", target)] if target else leaf)


# Transactional: SQLite's schema editor will not run inside the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_migration_0017_leaves_indexes_that_lead_with_each_key_and_reverses() -> None:
    for table, column in LED:
        assert [column] not in _indexes(table), table
        # Every lookup by the key still has an index that starts with it.
        assert any(columns[0] == column for columns in _indexes(table)) or table in (
            "answers_question",  # conversation_id: the unique (conversation, turn)
            "answers_feedback",  # answer_id: the unique (answer, user)
        ), table
    assert ["user_id", "created_at"] in _indexes("answers_question")

    try:
        _migrate("0016_document_chunk_count")
        for table, column in LED:
            assert [column] in _indexes(table), table
        assert ["user_id", "created_at"] not in _indexes("answers_question")
    finally:
        _migrate(None)
    for table, column in LED:
        assert [column] not in _indexes(table), table
    assert ["user_id", "created_at"] in _indexes("answers_question")


def test_the_unique_keys_that_replace_two_of_the_indexes_lead_with_them() -> None:
    with connection.cursor() as cursor:
        question = connection.introspection.get_constraints(cursor, "answers_question")
        feedback = connection.introspection.get_constraints(cursor, "answers_feedback")
    assert any(c["unique"] and c["columns"][0] == "conversation_id" for c in question.values())
    assert any(c["unique"] and c["columns"][0] == "answer_id" for c in feedback.values())
