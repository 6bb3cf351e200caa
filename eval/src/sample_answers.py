"""Print the offline answers to a fixed sample of dev questions, for judging by hand.

DJANGO_SECRET_KEY=x DATABASE_URL=sqlite:///$PWD/eval-db.sqlite3 \
    .venv/bin/python eval/src/sample_answers.py > /tmp/answers.md

The sample (docs/evaluation.md, "Hand-judged answers") is every fourth line of
``python-docs.dev.jsonl`` and every fourth of ``handbook.dev.jsonl``: 21 + 6 questions,
never the test split. Run it against the database ``make eval`` ingested.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402

from answers.citations import finalize_citations, strip_out_of_range_markers  # noqa: E402
from answers.evaluation import _generate  # noqa: E402
from answers.models import Document  # noqa: E402
from answers.pipeline import retrieve_sources  # noqa: E402
from answers.prompt import Prompt  # noqa: E402

SETS = ("python-docs.dev.jsonl", "handbook.dev.jsonl")
EVERY = 4


def sample() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in SETS:
        lines = (ROOT / "eval" / name).read_text(encoding="utf-8").splitlines()
        rows += [json.loads(line) for line in lines[::EVERY] if line.strip()]
    return rows


def main() -> None:
    user = User(username="evaluator", is_superuser=True, is_staff=True, is_active=True)
    for number, row in enumerate(sample(), start=1):
        question = str(row["question"])
        sources = retrieve_sources(user=user, question=question).sources
        print(f"## {number}. {question}\n\nexpect: {', '.join(row['expect'])}\n")  # type: ignore[arg-type]
        if not sources:
            print("(no sources)\n")
            continue
        prompt = Prompt(question=question, sources=tuple(s.as_prompt_source() for s in sources))
        raw = async_to_sync(_generate)(prompt)
        final = finalize_citations(strip_out_of_range_markers(raw, len(sources)), sources)
        keys = dict(Document.objects.values_list("pk", "source_key"))
        cited = ", ".join(f"[{n}] {keys[s.document_id]}" for n, s in enumerate(final.sources, 1))
        print(f"{final.text}\n\nsources: {cited}\n")


if __name__ == "__main__":
    main()
