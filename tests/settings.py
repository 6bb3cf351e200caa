"""Test settings: the project's settings, with a throwaway key and fast password hashing."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "insecure-key-for-tests-only")

from config.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
