"""Documents' near-duplicate signatures (ADR 0032), computed here for existing rows."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from answers.duplicates import body_signature


def backfill(apps: Any, schema_editor: Any) -> None:
    # Batches of 500 so a large corpus is never held in memory at once.
    Document = apps.get_model("answers", "Document")
    batch = []
    for document in Document.objects.only("id", "body").iterator(chunk_size=500):
        document.near_signature = body_signature(document.body)
        batch.append(document)
        if len(batch) == 500:
            Document.objects.bulk_update(batch, ["near_signature"])
            batch = []
    if batch:
        Document.objects.bulk_update(batch, ["near_signature"])


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0011_postgres_search_stats"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="near_signature",
            # Nullable with no default: SQLite adds the column in place (a rebuilt table
            # would break the search index triggers that name it).
            field=models.BinaryField(max_length=512, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="retrievedsource",
            name="dropped_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("below_threshold", "Below the score threshold"),
                    ("document_cap", "Over the per-document chunk cap"),
                    ("no_access", "The asking user may not view it"),
                    ("near_duplicate", "A near-duplicate of a higher-ranked source"),
                    ("source_limit", "Over the source limit"),
                ],
                max_length=32,
            ),
        ),
    ]
