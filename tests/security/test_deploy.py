"""17. The documented production environment passes ``check --deploy`` as it is."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Exactly the variables docs/deployment.md tells operators to set.
PRODUCTION_ENV = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(60),
    "DJANGO_ALLOWED_HOSTS": "answers.example.com",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_HSTS_SECONDS": "31536000",
    "DJANGO_HSTS_PRELOAD": "1",
}


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ANSWERS_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return manage(env, "check", "--deploy", "--fail-level", "WARNING")


@pytest.fixture(scope="module", autouse=True)
def collected_static_files() -> None:
    """The documented step before check --deploy (into the git-ignored staticfiles/)."""
    done = manage(PRODUCTION_ENV, "collectstatic", "--noinput", "-v", "0")
    assert done.returncode == 0, done.stderr


def test_the_documented_production_environment_passes_the_deploy_checks():
    result = check_deploy(PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


def test_leaving_out_a_documented_setting_is_caught():
    result = check_deploy({**PRODUCTION_ENV, "DJANGO_HSTS_SECONDS": "0"})
    assert result.returncode != 0 and "security.W004" in result.stdout + result.stderr


def test_debug_off_without_a_secret_key_refuses_to_start():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = check_deploy(env)
    assert result.returncode != 0 and "DJANGO_SECRET_KEY must be set" in result.stderr
