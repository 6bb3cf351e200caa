"""Each document's chunk count, stored with its chunks (services) instead of counted per
question in the candidates' fetch (selectors.candidates_for_hits)."""

from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def count_chunks(apps, schema_editor):
    Document = apps.get_model("answers", "Document")
    Chunk = apps.get_model("answers", "Chunk")
    counted = (
        Chunk.objects.filter(document_id=OuterRef("pk"))
        .order_by()
        .values("document_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    Document.objects.update(chunk_count=Coalesce(Subquery(counted), Value(0)))


class Migration(migrations.Migration):
    dependencies = [
        ("answers", "0015_document_access_index_covers_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="chunk_count",
            # Nullable with no default: SQLite adds the column in place (a rebuilt table
            # would break the search index triggers that name it).
            field=models.PositiveIntegerField(null=True, editable=False),
        ),
        migrations.RunPython(count_chunks, migrations.RunPython.noop, elidable=True),
    ]
