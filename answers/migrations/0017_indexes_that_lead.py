"""Indexes that lead with the column instead of indexes of the column alone.

- The per-user limits count a user's questions of the last minute at every ask; the index
  on ``user`` alone found all of the user's questions and read each row for its time (a
  user with 100,000 questions: 9–12 ms an ask on both backends). ``(user, created_at)``
  finds the last minute's directly, and serves everything the old index did.
- Three foreign keys had an index of their own beside one that starts with them
  (``Question.conversation``: the unique turn; ``RetrievedSource.question``: the
  ``(question, prompt_number)`` index; ``Feedback.answer``: the one-vote-per-user
  constraint). Each answer wrote about forty entries into the redundant retrieved-source
  index alone.

The old indexes are dropped by name as the database reports them (no table is rebuilt:
SQLite's AlterField would copy the question and retrieved-source tables, twice for
questions).
"""

from django.conf import settings
from django.db import migrations, models

import django.db.models.deletion

# (model, foreign key) whose single-column index goes.
LED = [
    ("feedback", "answer"),
    ("question", "conversation"),
    ("question", "user"),
    ("retrievedsource", "question"),
]


def _single_column_indexes(schema_editor, model, column):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [
        name
        for name, info in constraints.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == [column]
    ]


def drop_single_column_indexes(apps, schema_editor, led):
    """Drop each (model, foreign key) of ``led``'s index on that column alone."""
    for model_name, field_name in led:
        model = apps.get_model("answers", model_name)
        column = model._meta.get_field(field_name).column
        for name in _single_column_indexes(schema_editor, model, column):
            schema_editor.execute(
                schema_editor.sql_delete_index
                % {"table": schema_editor.quote_name(model._meta.db_table),
                   "name": schema_editor.quote_name(name)}
            )  # fmt: skip


def restore_single_column_indexes(apps, schema_editor, led):
    """Recreate them as Django first made them (its name, its SQL)."""
    for model_name, field_name in led:
        model = apps.get_model("answers", model_name)
        field = model._meta.get_field(field_name)
        if not _single_column_indexes(schema_editor, model, field.column):
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


def drop_indexes(apps, schema_editor):
    drop_single_column_indexes(apps, schema_editor, LED)


def restore_indexes(apps, schema_editor):
    restore_single_column_indexes(apps, schema_editor, LED)


def _foreign_key(to, related_name):
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to=to,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0016_document_chunk_count"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="question",
            index=models.Index(fields=["user", "created_at"], name="answers_question_user_time"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="feedback",
                    name="answer",
                    field=_foreign_key("answers.answer", "feedback"),
                ),
                migrations.AlterField(
                    model_name="question",
                    name="conversation",
                    field=_foreign_key("answers.conversation", "questions"),
                ),
                migrations.AlterField(
                    model_name="question",
                    name="user",
                    field=_foreign_key(settings.AUTH_USER_MODEL, "answer_questions"),
                ),
                migrations.AlterField(
                    model_name="retrievedsource",
                    name="question",
                    field=_foreign_key("answers.question", "retrieved_sources"),
                ),
            ],
            database_operations=[migrations.RunPython(drop_indexes, restore_indexes)],
        ),
    ]
