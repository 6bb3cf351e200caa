"""Ask a question from the terminal: the answer streams, then the Sources."""

from __future__ import annotations

import asyncio
import math
import shutil
import unicodedata
import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from answers import pipeline


class Command(BaseCommand):
    help = "Ask a question as a user and stream the answer, then its Sources."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument("--user", help="Username to ask as (default: the first superuser).")
        parser.add_argument("--conversation", type=uuid.UUID, help="Continue this conversation.")

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["user"])
        asyncio.run(self._ask(user, options["question"], options["conversation"]))

    def _user(self, username: str | None) -> Any:
        User = get_user_model()
        if username:
            user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
            if user is None:
                raise CommandError(f"No user named {username!r}.")
            return user
        user = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
        if user is None:
            raise CommandError("No superuser exists; pass --user NAME.")
        return user

    async def _ask(self, user: Any, question: str, conversation_id: uuid.UUID | None) -> None:
        try:
            run = await pipeline.start_answer(
                user=user, question=question, conversation_id=conversation_id
            )
        except pipeline.AskRefused as exc:
            raise CommandError(exc.message) from None
        # On a terminal the answer streams, and if finalizing renumbered its citations the
        # streamed text is erased and replaced, so the reader sees one answer whose numbers
        # match the Sources below. Into a pipe or file only the final answer is written.
        live = self.stdout.isatty()
        streamed: list[str] = []
        async for event in run.events():
            if isinstance(event, pipeline.TokenEvent):
                streamed.append(event.text)
                if live:
                    self.stdout.write(event.text, ending="")
                    self.stdout.flush()
            elif isinstance(event, pipeline.ErrorEvent):
                if not live and streamed:
                    self.stdout.write("".join(streamed))  # what was written before it failed
                self.stdout.write("")
                raise CommandError(event.message)
            elif isinstance(event, pipeline.DoneEvent):
                answer = event.answer
                shown = "".join(streamed)
                if not live:
                    self.stdout.write(answer.text)
                elif answer.text != shown:
                    self.stdout.write(_erase(shown) + answer.text)
                else:
                    self.stdout.write("")
                self.stdout.write("Sources:")
                for ref in answer.references:
                    self.stdout.write(
                        f"  [{ref.index}] {ref.title} ({ref.url}) score {ref.score:.2f}"
                    )
                if not answer.references:
                    self.stdout.write("  (none)")
                self.stdout.write(f"Conversation: {answer.conversation_id}")


def _erase(shown: str) -> str:
    """Terminal codes that move back to where ``shown`` began and clear from there on."""
    columns = max(1, shutil.get_terminal_size().columns)
    rows = sum(max(1, math.ceil(_width(line) / columns)) for line in shown.split("\n"))
    up = f"\x1b[{rows - 1}A" if rows > 1 else ""
    return f"\r{up}\x1b[J"


def _width(line: str) -> int:
    # East Asian wide and full-width characters take two columns.
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)
