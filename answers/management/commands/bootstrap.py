"""First-run set-up for ``make run``: the demo corpus and a local staff login."""

from __future__ import annotations

import secrets
from typing import Any

from axes.utils import reset as axes_reset
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from answers.models import Document


class Command(BaseCommand):
    help = "Load the demo corpus if the corpus is empty, and make sure a staff login exists."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--username",
            default="admin",
            help="The staff login to create when none exists, or to reset (default: admin).",
        )
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="Give the login --username a new generated password and print it once.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not Document.objects.exists():
            self.stdout.write("The corpus is empty: loading the Python language reference.")
            call_command("ingest", python_docs=True, stdout=self.stdout, stderr=self.stderr)
        User = get_user_model()
        username = options["username"]
        if options["reset_password"]:
            self._reset_password(User, username)
            return
        if User.objects.filter(is_staff=True, is_active=True).exists():
            self.stdout.write(
                "A staff login exists already. Lost its password? "
                f"`manage.py bootstrap --reset-password` prints a new one for {username!r} "
                "(`--username NAME` for another login; `manage.py changepassword NAME` "
                "lets you type one)."
            )
            return
        if User.objects.filter(**{User.USERNAME_FIELD: username}).exists():
            self.stderr.write(
                f"No staff login exists, and {username!r} is taken by a non-staff user: "
                "run `manage.py createsuperuser`, or `manage.py bootstrap --username OTHER`."
            )
            return
        self._check_username(User, username)
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(
            self.style.SUCCESS(
                f"Created a local staff login:\n  username: {username}\n  password: {password}"
            )
        )

    def _check_username(self, User: Any, username: str) -> None:
        """The login to create must be one the login page accepts: create_superuser checks
        nothing but emptiness (a ValueError), and too long a name fails on PostgreSQL."""
        if not username.strip():
            raise CommandError("--username needs a name (default: admin).")
        field = User._meta.get_field(User.USERNAME_FIELD)
        try:
            field.clean(username, None)
        except ValidationError as exc:
            raise CommandError(
                f"--username {username!r} is not a valid username: {' '.join(exc.messages)}"
            ) from None

    def _reset_password(self, User: Any, username: str) -> None:
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(
                f"No login {username!r}: run `manage.py bootstrap` to create one, "
                "or pass --username."
            )
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.save(update_fields=["password"])
        # Whoever lost the password has likely been locked out guessing it (django-axes).
        axes_reset(username=username)
        self.stdout.write(
            self.style.SUCCESS(
                f"New password for {username!r} (shown once):\n  password: {password}"
            )
        )
