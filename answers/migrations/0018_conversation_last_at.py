"""Each conversation's last activity, stored, so the history lists conversations from an
index (ADR 0039, "Later"): the list aggregated every question of the user for each page.

``last_at`` is filled from the conversations' questions once; the (owner, last_at) index
replaces the index on the owner alone, dropped by the name the database reports (as in
0017: no table rebuilt on SQLite). Nullable: SQLite adds the column in place.
"""

import importlib

from django.conf import settings
from django.db import migrations, models
from django.db.models import Max, OuterRef, Subquery

import django.db.models.deletion

_0017 = importlib.import_module("answers.migrations.0017_indexes_that_lead")


def fill_last_at(apps, schema_editor):
    Conversation = apps.get_model("answers", "Conversation")
    Question = apps.get_model("answers", "Question")
    latest = (
        Question.objects.filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(latest=Max("created_at"))
        .values("latest")
    )
    Conversation.objects.update(last_at=Subquery(latest))


def drop_owner_index(apps, schema_editor):
    _0017.drop_single_column_indexes(apps, schema_editor, [("conversation", "owner")])


def restore_owner_index(apps, schema_editor):
    _0017.restore_single_column_indexes(apps, schema_editor, [("conversation", "owner")])


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0017_indexes_that_lead"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="last_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.RunPython(fill_last_at, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(fields=["owner", "last_at"], name="answers_conversation_recent"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="conversation",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="answer_conversations",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_owner_index, restore_owner_index)],
        ),
    ]
