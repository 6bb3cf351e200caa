"""Extraction kept exact while it is made faster (ADR 0030, "Later").

``python -m bench.extraction_check save FILE [ROOT ...]`` extracts every HTML page under
the ROOTs (default: every HTML page under /usr/share/doc) and writes the SHA-256 of each
page's title and body, or its error, to FILE; ``check FILE [ROOT ...]`` extracts them again
and prints the pages whose result differs, exiting 1 if any does. Save with the code
before a change, check with the code after it (a checkout of each: run from its
directory, ``PYTHONPATH`` set to it). Also prints the time a page took, which on a shared
machine is only a rough guide: compare instruction counts for that (``valgrind
--tool=callgrind``, deterministic whatever else runs).

No database and no settings: only ``answers.ingestion``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from answers.ingestion import ExtractionError, extract_file, quiet_libraries

DEFAULT_ROOTS = (Path("/usr/share/doc"),)


def fingerprints(roots: list[Path]) -> tuple[dict[str, str], float]:
    """Each page's fingerprint (or error), and the seconds extraction took in all."""
    pages = sorted(
        page for root in roots for suffix in ("*.html", "*.htm") for page in root.rglob(suffix)
    )
    found: dict[str, str] = {}
    start = time.perf_counter()
    with quiet_libraries():
        for page in pages:
            try:
                extracted = extract_file(page)
            except ExtractionError as exc:
                found[str(page)] = f"error: {exc}"
                continue
            text = f"{extracted.title}\0{extracted.body}".encode("utf-8", "surrogatepass")
            found[str(page)] = hashlib.sha256(text).hexdigest()
    return found, time.perf_counter() - start


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"save", "check"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, file, *rest = argv
    roots = [Path(root) for root in rest] or list(DEFAULT_ROOTS)
    saved: dict[str, str] = {}
    if command == "check":  # read first: a wrong path should not cost a whole extraction
        try:
            saved = json.loads(Path(file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"cannot read the saved fingerprints {file}: {exc}", file=sys.stderr)
            return 2
    found, seconds = fingerprints(roots)
    pace = f"{len(found)} pages, {1000 * seconds / max(len(found), 1):.3f} ms a page"
    if command == "save":
        Path(file).write_text(json.dumps(found, indent=0, sort_keys=True), encoding="utf-8")
        print(f"saved {pace}")
        return 0
    differ = sorted(
        page for page in saved.keys() | found.keys() if saved.get(page) != found.get(page)
    )
    print(f"checked {pace}: {len(differ)} differ")
    for page in differ[:20]:
        print(f"  {page}: {saved.get(page, '(not saved)')} -> {found.get(page, '(not found)')}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
