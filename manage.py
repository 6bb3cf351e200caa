#!/usr/bin/env python
from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 (reads the environment: config/settings.py)
    except ImproperlyConfigured as exc:
        # A bad variable: the one line that names it, not Django's settings import above it.
        sys.exit(f"ImproperlyConfigured: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
