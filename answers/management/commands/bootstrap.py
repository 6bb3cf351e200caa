"""First-run set-up for ``make run``: the demo corpus and a local staff login."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from answers.models import Document


class Command(BaseCommand):
    help = "Load the demo corpus if the corpus is empty, and make sure a staff login exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        if not Document.objects.exists():
            self.stdout.write("The corpus is empty: loading the Python language reference.")
            call_command("ingest", python_docs=True, stdout=self.stdout, stderr=self.stderr)
        User = get_user_model()
        username = options["username"]
        if User.objects.filter(is_staff=True, is_active=True).exists():
            self.stdout.write("A staff login exists already.")
            return
        if User.objects.filter(**{User.USERNAME_FIELD: username}).exists():
            self.stderr.write(
                f"No staff login exists, and {username!r} is taken by a non-staff user: "
                "run `manage.py createsuperuser`, or `manage.py bootstrap --username OTHER`."
            )
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(
            self.style.SUCCESS(
                f"Created a local staff login:\n  username: {username}\n  password: {password}"
            )
        )
