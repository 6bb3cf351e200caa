"""Count the chunks of an ingested SQLite database that hold site chrome (ADR 0031).

``python -m bench.navigation_chunks DB.sqlite3...``: for each database, its chunks, and how
many hold a line of the navigation that the Debian documentation of Django, PostgreSQL,
pandas and SciPy repeats on every page (issue 23), then, counted on their own, Sphinx
permalink marks (a heading ending in "¶"), viewcode's "[source]"/"[docs]" links, redirect
stubs and Sphinx ``_sources`` copies. The lines are those the sites' chrome renders as text:
Django's header, footer and sidebar, pydata-sphinx-theme's previous/next, "On this page",
footer and edit links, DocBook's "Table of Contents". Not part of ``python -m bench``: it
reads databases made by ``manage.py ingest`` (the commands are in ADR 0031).
"""

from __future__ import annotations

import re
import sqlite3
import sys

NAVIGATION_LINES = frozenset(
    {
        "Home | Table of contents | Index | Modules", "# Django 3.2.25 documentation",
        "### Last update:", "Previous topic", "Next topic", "Quick search", "#### Previous topic",
        "#### Next topic", "### Quick search", "### Table of Contents", "previous", "next",
        "On this page", "Edit this page", "Show Source", "Show this page source",
        "Edit on GitHub", "**Table of Contents**",
    }
)  # fmt: skip
NAVIGATION_PATTERNS = [
    re.compile(r"^(« previous \| )?up( \| next »)?$"),
    re.compile(r"^« previous( \| up)?$"),
    re.compile(r"^© (\d{4} pandas via NumFOCUS|Copyright 2008-2023, The SciPy community)"),
    re.compile(r"^Created using Sphinx"),
    re.compile(r"^Prev \| (Up \| )?.*Next$"),
]
PERMALINK = re.compile(r"^#{1,6} .*¶$", re.M)
STUBS = ("The page has been moved to", "This API page has moved")


def is_navigation(text: str) -> bool:
    for line in text.split("\n"):
        line = line.strip()
        if line in NAVIGATION_LINES or any(p.search(line) for p in NAVIGATION_PATTERNS):
            return True
    return False


def count(database: str) -> dict[str, int]:
    counts = dict.fromkeys(
        ["chunks", "navigation", "permalink", "viewcode", "stubs", "sources", "any"], 0
    )
    query = (
        "SELECT d.source_key, c.text FROM answers_chunk c"
        " JOIN answers_document d ON d.id = c.document_id"
    )
    with sqlite3.connect(database) as connection:
        for key, text in connection.execute(query):
            found = {
                "navigation": is_navigation(text),
                "permalink": PERMALINK.search(text) is not None,
                "viewcode": "[source]" in text or "[docs]" in text,
                "stubs": any(stub in text for stub in STUBS),
                "sources": "/_sources/" in key,
            }
            counts["chunks"] += 1
            counts["any"] += any(found.values())
            for name, hit in found.items():
                counts[name] += hit
    return counts


def main(databases: list[str]) -> None:
    for database in databases:
        c = count(database)
        print(
            f"{database}: {c['chunks']} chunks; navigation {c['navigation']}, "
            f"permalink ¶ {c['permalink']}, [source]/[docs] {c['viewcode']}, "
            f"redirect stubs {c['stubs']}, _sources copies {c['sources']}; any {c['any']}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
