"""Test settings: the project's settings, with a throwaway key and fast password hashing."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "insecure-key-for-tests-only")
# A developer's `.env` (written by `make run`: DJANGO_DEBUG=1) must not change the tests.
os.environ["DJANGO_ENV_FILE"] = ""

from config.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Most tests keep their data in a transaction only their own connection sees: retrieval
# must run on that connection's thread. Live servers (tests/live.py) set the variable and
# use retrieval threads of their own; tests/test_pipeline_threads.py turns them on.
ANSWERS.setdefault("RETRIEVAL_THREADS", 0)  # noqa: F405
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
# Tests render templates without running collectstatic first.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
STATIC_ROOT = None  # type: ignore[assignment]  # whitenoise serves from the finders in tests
# A file (not memory) so a live daphne process can share it; overridable so that two test
# runs on one machine do not collide.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ.get(  # noqa: F405
        "ANSWERS_TEST_DB",
        str(BASE_DIR / "test-db.sqlite3"),  # noqa: F405
    )
else:
    # PostgreSQL (the second CI run): pytest-django creates test_<NAME> afresh each run;
    # one name per run so two runs on one machine do not collide.
    DATABASES["default"].setdefault("TEST", {})["NAME"] = os.environ.get(  # noqa: F405
        "ANSWERS_TEST_DB",
        "test_" + str(DATABASES["default"]["NAME"]),  # noqa: F405
    )

if REDIS_URL:  # noqa: F405
    # Test runs (and their live servers) on one Redis must not read each other's streams.
    # pytest-xdist's workers each get a database of their own (pytest-django adds the
    # worker's name to it), and here a prefix of their own.
    _worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    _run = str(DATABASES["default"]["TEST"]["NAME"]).replace("/", "_") + _worker  # noqa: F405
    CACHES["default"]["KEY_PREFIX"] = f"answers-test-{_run}"  # noqa: F405
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"answers-test-{_run}"  # noqa: F405
