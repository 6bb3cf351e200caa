"""Indexes in the admin lists' orders. The answers' (created_at, id): the answer list's
page was every answer aggregated and sorted, its date hierarchy a scan for the first and
last, and the content-gap report's period a scan of the whole history. The answers' provider: the
list's provider filter read every answer for its choices. The documents'
(title, id): the document list and its autocomplete sorted every document for a page.
Adding an index changes no row and runs the same on SQLite and PostgreSQL (a plain CREATE
INDEX; it reverses by dropping it).
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
        migrations.AddIndex(
            model_name="answer",
            index=models.Index(fields=["provider"], name="answers_answer_provider"),
        ),
        migrations.AddIndex(
            model_name="document",
            index=models.Index(fields=["title", "id"], name="answers_document_title"),
        ),
    ]
