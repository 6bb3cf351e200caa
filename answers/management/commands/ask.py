"""Ask a question from the terminal: the answer streams, then the Sources."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import shutil
import signal
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
        try:
            asyncio.run(self._ask(user, options["question"], options["conversation"]))
        except KeyboardInterrupt:
            # A second Ctrl-C, or one before the question was stored.
            raise CommandError("Stopped.", returncode=130) from None

    def _user(self, username: str | None) -> Any:
        User = get_user_model()
        # Given but empty (an unset variable): an error, not the first superuser, who sees
        # every document.
        if username is not None and not username.strip():
            raise CommandError("--user needs a name (leave it out to ask as the first superuser).")
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
        # SIGTERM (`timeout`, a service manager) stops the answer as Ctrl-C does (asyncio.run
        # cancels this task on SIGINT), rather than killing the process with it unstored.
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        self.stop_signal = signal.SIGINT

        def terminate() -> None:
            self.stop_signal = signal.SIGTERM
            if task is not None:
                task.cancel()

        # Not in the main thread (tests call the command from others), nor on Windows.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, terminate)
        try:
            await self._answer(user, question, conversation_id)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGTERM)

    async def _answer(self, user: Any, question: str, conversation_id: uuid.UUID | None) -> None:
        # Shielded: Ctrl-C (asyncio.run cancels this task) while the question is being
        # stored lets it be stored, so that the stop below is stored with it.
        starting = asyncio.ensure_future(
            pipeline.start_answer(user=user, question=question, conversation_id=conversation_id)
        )
        stopped = False
        try:
            try:
                run = await asyncio.shield(starting)
            except asyncio.CancelledError:
                stopped = _uncancel()
                run = await starting
        except pipeline.AskRefused as exc:
            raise CommandError(exc.message) from None
        # On a terminal the answer streams, and if finalizing renumbered its citations the
        # streamed text is erased and replaced, so the reader sees one answer whose numbers
        # match the Sources below. Into a pipe or file only the final answer is written.
        live = self.stdout.isatty()
        streamed: list[str] = []
        done: pipeline.DoneEvent | None = None
        if not stopped:
            try:
                async for event in run.events():
                    if isinstance(event, pipeline.TokenEvent):
                        streamed.append(event.text)
                        if live:
                            self.stdout.write(_printable(event.text), ending="")
                            self.stdout.flush()
                    elif isinstance(event, pipeline.ErrorEvent):
                        if not live and streamed:
                            # what was written before it failed
                            self.stdout.write(_printable("".join(streamed)))
                        self.stdout.write("")
                        raise CommandError(event.message)
                    elif isinstance(event, pipeline.DoneEvent):
                        done = event
            except asyncio.CancelledError:
                stopped = _uncancel()
        if stopped:
            # Ctrl-C: kept as interrupted, as the page's Stop keeps it (the pipeline stored
            # it if generation had begun; ``stopped`` stores it otherwise, and reads it).
            done = await run.stopped()
        assert done is not None
        self._write_done(done.answer, "".join(streamed), live=live)
        if stopped:
            raise CommandError(
                "Stopped: the answer so far is kept as interrupted "
                f"(conversation {done.answer.conversation_id}).",
                returncode=128 + self.stop_signal,
            )

    def _write_done(self, answer: Any, shown: str, *, live: bool) -> None:
        text = _printable(answer.text)
        if not live:
            self.stdout.write(text)
        elif answer.text != shown:
            self.stdout.write(_erase(_printable(shown)) + text)
        else:
            self.stdout.write("")
        self.stdout.write("Sources:")
        for ref in answer.references:
            self.stdout.write(
                f"  [{ref.index}] {_printable(ref.title)} ({_printable(ref.url)}) "
                f"score {ref.score:.2f}"
            )
        if not answer.references:
            self.stdout.write("  (none)")
        self.stdout.write(f"Conversation: {answer.conversation_id}")


def _uncancel() -> bool:
    """Take back this task's cancellation (Ctrl-C, as asyncio.run delivers it), so that
    storing the stop is not itself cancelled; True."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True


# Control characters other than line breaks and tabs: a document's or a model's text must
# not move the cursor, clear the screen or retitle the terminal (ESC sequences).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` with each control character shown as ``\\xNN``, not obeyed."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match[0]):02x}", text)


def _erase(shown: str) -> str:
    """Terminal codes that move back to where ``shown`` began and clear from there on."""
    columns = max(1, shutil.get_terminal_size().columns)
    rows = sum(max(1, math.ceil(_width(line) / columns)) for line in shown.split("\n"))
    up = f"\x1b[{rows - 1}A" if rows > 1 else ""
    return f"\r{up}\x1b[J"


def _width(line: str) -> int:
    # East Asian wide and full-width characters take two columns.
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)
