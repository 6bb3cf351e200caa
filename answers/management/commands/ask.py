"""Ask a question from the terminal: the answer streams, then the Sources."""

from __future__ import annotations

import asyncio
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
        streamed: list[str] = []
        async for event in run.events():
            if isinstance(event, pipeline.TokenEvent):
                streamed.append(event.text)
                self.stdout.write(event.text, ending="")
                self.stdout.flush()
            elif isinstance(event, pipeline.ErrorEvent):
                self.stdout.write("")
                raise CommandError(event.message)
            elif isinstance(event, pipeline.DoneEvent):
                answer = event.answer
                self.stdout.write("\n")
                if answer.text != "".join(streamed):
                    # Citations were renumbered: show the text the Sources below belong to.
                    self.stdout.write("With citations finalized:\n" + answer.text + "\n")
                self.stdout.write("Sources:")
                for ref in answer.references:
                    self.stdout.write(
                        f"  [{ref.index}] {ref.title} ({ref.url}) score {ref.score:.2f}"
                    )
                if not answer.references:
                    self.stdout.write("  (none)")
                self.stdout.write(f"Conversation: {answer.conversation_id}")
