"""The corpus every test database starts with: the Python reference plus restricted docs."""

from __future__ import annotations

from django.contrib.auth.models import Group

from answers import services
from answers.management.commands.ingest import python_doc_topics

RESTRICTED = {
    "Project Nightjar launch plan": (
        "Project Nightjar is the confidential zeppelin launch programme. The Nightjar "
        "zeppelin launches from hangar nine. Nightjar budgets are approved by the board."
    ),
    "Nightjar zeppelin hangar safety": (
        "Zeppelin hangar safety for Nightjar: helium checks happen daily, and the zeppelin "
        "mooring mast is inspected before each Nightjar launch."
    ),
}


def load_corpus() -> None:
    """Through the bulk ingest path (one transaction per call, a fixed number of queries):
    every transactional test loads it again, and one document at a time took twice as
    long."""
    topics = python_doc_topics()
    services.documents_ingest_batch(
        sources=[
            services.DocumentSource(
                source_key=f"python-docs:{topic.key}",
                title=topic.title,
                body=topic.text,
                url=topic.url,
            )
            for topic in topics
        ],
        chunk_size=1200,
    )
    vault, _ = Group.objects.get_or_create(name="vault")
    services.documents_ingest_batch(
        sources=[
            services.DocumentSource(source_key=f"vault:{title}", title=title, body=body)
            for title, body in RESTRICTED.items()
        ],
        group=vault,
        chunk_size=1200,
    )


def ingest_text(source_key: str, title: str, body: str) -> services.IngestResult:
    """One small document, chunked as the app's default does."""
    return services.document_ingest(source_key=source_key, title=title, body=body, chunk_size=1200)
