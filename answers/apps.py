from __future__ import annotations

import sqlite3
from typing import Any

from django.apps import AppConfig

# SQLite's default limit on a statement's parameters since 3.32 (2020); the build's own
# limit is used when lower.
SQLITE_PARAMETERS = 32_766


def sqlite_parameter_limit(*, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: Django's bulk writes on SQLite batch to 999
    parameters (SQLite's limit before 3.32), so a question's candidates (14 columns each)
    took one INSERT per 71 of them; this sets the connection's real limit (bounded by
    the 3.32 default), one INSERT for up to 2,340 candidates."""
    if connection.vendor != "sqlite":
        return
    limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    connection.features.max_query_params = min(limit, SQLITE_PARAMETERS)


def document_pre_delete(*, instance: Any, **kwargs: Any) -> None:
    """``pre_delete`` receiver for documents, however they are deleted (the admin, its
    bulk action, a shell): the access they have now is the last word on their snapshots."""
    from .services import document_snapshots_close

    document_snapshots_close(document=instance)


class AnswersConfig(AppConfig):
    name = "answers"
    verbose_name = "Cited answers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import pre_delete

        from . import checks, conf, registry  # noqa: F401  (registers the check and signals)
        from .search.stemming import register_sqlite_function

        # The FTS5 index triggers stem in Python (ADR 0013): every connection needs it.
        connection_created.connect(register_sqlite_function, dispatch_uid="answers_stem")
        connection_created.connect(sqlite_parameter_limit, dispatch_uid="answers_parameters")
        pre_delete.connect(
            document_pre_delete, sender=self.get_model("Document"), dispatch_uid="answers_snapshots"
        )
