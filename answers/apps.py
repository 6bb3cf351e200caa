from __future__ import annotations

from django.apps import AppConfig


class AnswersConfig(AppConfig):
    name = "answers"
    verbose_name = "Cited answers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from . import checks, conf, registry  # noqa: F401  (registers the check and signals)
        from .search.stemming import register_sqlite_function

        # The FTS5 index triggers stem in Python (ADR 0013): every connection needs it.
        connection_created.connect(register_sqlite_function, dispatch_uid="answers_stem")
