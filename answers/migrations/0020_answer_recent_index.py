"""An index on the answers' (created_at, id), the admin list's order: its page was every
answer aggregated and sorted, its date hierarchy a scan for the first and last, and the
content-gap report's period a scan of the whole history. Adding an index changes no row
and runs the same on SQLite and PostgreSQL (a plain CREATE INDEX; it reverses by dropping).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0019_question_context"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="answer",
            index=models.Index(fields=["created_at", "id"], name="answers_answer_recent"),
        ),
    ]
