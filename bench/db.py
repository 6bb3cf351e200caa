"""Throwaway SQLite databases: one migrated template, copied for each scenario.

Copying a migrated file is much faster than migrating again, and gives every scenario an
empty corpus of its own (ingest throughput must not depend on what ran before it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from django.core.management import call_command
from django.db import connection, connections


class Databases:
    def __init__(self, folder: Path, main: Path) -> None:
        self.folder = folder
        self.main = main
        self.template = folder / "template.sqlite3"

    def migrate(self) -> None:
        """Migrate the main database (``DATABASE_URL``) and keep an empty copy of it."""
        call_command("migrate", verbosity=0)
        self._checkpoint()
        connections.close_all()
        shutil.copyfile(self.main, self.template)

    def fresh(self, name: str) -> Path:
        """Switch the default connection to a new, empty, migrated database file."""
        path = self.folder / f"{name}.sqlite3"
        shutil.copyfile(self.template, path)
        self.use(path)
        return path

    def use(self, path: Path) -> None:
        self._checkpoint()
        connections.close_all()
        connections["default"].settings_dict["NAME"] = str(path)

    def release(self) -> None:
        """Flush the WAL and close, so another process (daphne) sees every write."""
        self._checkpoint()
        connections.close_all()

    @staticmethod
    def _checkpoint() -> None:
        if connection.connection is not None:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
