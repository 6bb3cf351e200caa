"""What the corpus lacks: the content-gap report of the admin, on the terminal (ADR 0024)."""

from __future__ import annotations

import csv
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from answers import selectors
from answers.evaluation import evaluation_user_default
from answers.gaps import gap_groups, gap_rows


class Command(BaseCommand):
    help = (
        "Group the questions of the last --days that got no answer, were voted down or cite "
        "a weakly supporting passage, and print each group's size, reasons, weeks, examples "
        "and nearest documents (--csv: as CSV). --user: as that reviewer may see them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=30, help="Period (1-366, default 30).")
        parser.add_argument("--csv", action="store_true", help="Write CSV to standard output.")
        parser.add_argument(
            "--user",
            help="Report as this reviewer (their access applies). Default: everything, as "
            "a reviewer holding review_all_answers sees it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if not 1 <= days <= 366:
            raise CommandError("--days must be between 1 and 366.")
        reviewer: Any = evaluation_user_default()
        # Given but empty (an unset variable): an error, not the report of everything.
        if options["user"] is not None and not options["user"].strip():
            raise CommandError("--user needs a name (leave it out to report everything).")
        if options["user"]:
            reviewer = get_user_model().objects.filter(username=options["user"]).first()
            if reviewer is None:
                raise CommandError(f"No user {options['user']!r}.")
        questions = selectors.gap_questions_for_review(
            reviewer=reviewer, since=timezone.now() - timedelta(days=days)
        )
        rows = gap_rows(gap_groups(questions))
        if options["csv"]:
            csv.writer(self.stdout).writerows(rows)
            return
        self.stdout.write(
            f"{len(questions)} gap question(s) in the last {days} days, "
            f"{len(rows) - 1} group(s), largest first."
        )
        header = rows[0]
        for row in rows[1:]:
            self.stdout.write("")
            for name, value in zip(header, row, strict=True):
                if value and value != "0":
                    self.stdout.write(f"  {name}: {value}")
