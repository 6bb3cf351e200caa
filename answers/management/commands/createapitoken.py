from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from answers import services


class Command(BaseCommand):
    help = "Create an API token for USERNAME. The token is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="A label to tell tokens apart.")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist:
            raise CommandError(f"No user named {options['username']!r}.") from None
        if not user.is_active:
            raise CommandError(f"User {options['username']!r} is inactive.")
        name = options["name"].strip()[:100] or "cli"
        token, raw = services.api_token_create(user=user, name=name)
        self.stderr.write(
            f"Created token {token.prefix}… for {user.get_username()}. It is shown once:"
        )
        self.stdout.write(raw)
