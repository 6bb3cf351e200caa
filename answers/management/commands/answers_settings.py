"""Print the ``ANSWERS`` settings reference (docs/settings.md) from their one declaration."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from answers.conf import settings_reference


class Command(BaseCommand):
    help = "Print the ANSWERS settings reference as Markdown: > docs/settings.md to refresh it."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(settings_reference(), ending="")
