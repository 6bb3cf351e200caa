"""``answers/migrations``: what a migration leaves in the database, and that it reverses."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db

# Migration 0017: the foreign keys whose own index went (another index leads with them).
LED = [
    ("answers_conversation", "owner_id"),  # migration 0018: (owner, last_at)
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
def test_migrations_0017_and_0018_leave_indexes_that_lead_with_each_key_and_reverse() -> None:
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
        assert ["owner_id", "last_at"] not in _indexes("answers_conversation")
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


def test_migration_0018_fills_each_conversations_last_activity(asker) -> None:  # type: ignore[no-untyped-def]
    import importlib
    from datetime import timedelta

    from django.apps import apps
    from django.utils import timezone

    from answers.models import Conversation, Question

    conversation = Conversation.objects.create(owner=asker)
    for turn in (1, 2):
        Question.objects.create(conversation=conversation, turn=turn, text="q", user=asker)
    latest = timezone.now() - timedelta(days=2)
    Question.objects.filter(conversation=conversation, turn=2).update(created_at=latest)
    Question.objects.filter(conversation=conversation, turn=1).update(
        created_at=latest - timedelta(hours=1)
    )
    empty = Conversation.objects.create(owner=asker)  # never asked in: stays out of the list
    Conversation.objects.update(last_at=None)  # as the column is added
    migration = importlib.import_module("answers.migrations.0018_conversation_last_at")
    migration.fill_last_at(apps, None)
    assert Conversation.objects.get(pk=conversation.pk).last_at == latest
    assert Conversation.objects.get(pk=empty.pk).last_at is None


def test_migration_0019_links_each_follow_up_to_every_earlier_turn(asker) -> None:  # type: ignore[no-untyped-def]
    # What an older follow-up's prompt held is not known: the most it can have held.
    import importlib
    from types import SimpleNamespace

    from django.apps import apps

    from answers.models import Conversation, Question

    conversation, other = (Conversation.objects.create(owner=asker) for _ in range(2))
    turns = [
        Question.objects.create(conversation=conversation, turn=turn, text="q", user=asker)
        for turn in (1, 2, 3)
    ]
    alone = Question.objects.create(conversation=other, turn=1, text="q", user=asker)
    migration = importlib.import_module("answers.migrations.0019_question_context")
    migration.link_earlier_turns(apps, SimpleNamespace(connection=connection))
    context = {q.pk: {c.pk for c in q.context.all()} for q in [*turns, alone]}
    first, second, third = (q.pk for q in turns)
    assert context == {first: set(), second: {first}, third: {first, second}, alone.pk: set()}
