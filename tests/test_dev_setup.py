"""The development set-up `make run` leaves behind: a `.env` every `manage.py` command reads
(variables already set win; production without it still needs a real key; the tests read
none), and `bootstrap`'s way back to a lost password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.live import REPO_ROOT

PRINT_DEBUG = "from django.conf import settings; print('DEBUG', settings.DEBUG)"


def _settings(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    env_file: str | None,
    module: str = "config.settings",
    code: str = PRINT_DEBUG,
    prelude: str = "",
    **env: str,
):
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ANSWERS_", "DATABASE_")) and k != "REDIS_URL"
    }
    clean["DJANGO_SETTINGS_MODULE"] = module
    if env_file is not None:
        clean["DJANGO_ENV_FILE"] = env_file
    clean["DATABASE_URL"] = f"sqlite:///{tmp_path / 'unused.sqlite3'}"
    return subprocess.run(
        [sys.executable, "-c", f"{prelude}import django; django.setup(); {code}"],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def dev_env(tmp_path: Path) -> str:
    env_file = tmp_path / ".env"
    env_file.write_text("# as make run writes it\nDJANGO_DEBUG=1\n")
    return str(env_file)


def test_the_env_file_turns_on_the_development_set_up(tmp_path, dev_env):
    result = _settings(tmp_path, dev_env)
    assert result.returncode == 0, result.stderr
    assert "DEBUG True" in result.stdout


def test_a_variable_already_set_wins_over_the_env_file(tmp_path, dev_env):
    result = _settings(tmp_path, dev_env, DJANGO_DEBUG="0")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_without_an_env_file_production_still_needs_a_real_key(tmp_path):
    result = _settings(tmp_path, "")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr
    result = _settings(tmp_path, "", DJANGO_SECRET_KEY="k" * 50)
    assert result.returncode == 0, result.stderr
    assert "DEBUG False" in result.stdout


def test_an_env_file_named_but_missing_is_named_not_skipped(tmp_path):
    """DJANGO_ENV_FILE=/etc/answers.env with a typo read nothing in silence: the operator
    then read "DJANGO_SECRET_KEY must be set" about a key that is in the file."""
    result = _settings(tmp_path, str(tmp_path / "answers.env"))
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "django.core.exceptions.ImproperlyConfigured: DJANGO_ENV_FILE names "
        f"{tmp_path / 'answers.env'}, which cannot be read (set it empty to read none)."
    ), last


def test_a_command_starts_without_a_banner_on_stderr(tmp_path, dev_env):
    # An operator's command prints only what it has to say (django-axes printed its
    # version at every process start).
    result = _settings(tmp_path, dev_env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_the_test_settings_read_no_env_file(tmp_path, dev_env):
    result = _settings(tmp_path, dev_env, module="tests.settings")
    assert result.returncode == 0, result.stderr
    assert "DEBUG False" in result.stdout


def test_the_env_file_is_git_ignored():
    result = subprocess.run(
        ["git", "check-ignore", "-q", ".env"], cwd=REPO_ROOT, check=False, timeout=30
    )
    assert result.returncode == 0


# ------------------------------------------------------------------ bootstrap passwords


@pytest.mark.django_db
def test_bootstrap_says_how_to_get_a_lost_password_back(django_user_model, capsys):
    django_user_model.objects.create_superuser(username="admin", email="", password="old-pw")
    call_command("bootstrap")
    out = capsys.readouterr().out
    assert "A staff login exists already." in out
    assert "manage.py bootstrap --reset-password" in out
    assert "manage.py changepassword" in out


@pytest.mark.django_db
def test_bootstrap_reset_password_prints_a_new_one_and_lifts_a_lockout(
    django_user_model, capsys, client
):
    django_user_model.objects.create_superuser(username="admin", email="", password="old-pw")
    for _ in range(5):
        client.post("/accounts/login/", {"username": "admin", "password": "forgotten"})
    old = {"username": "admin", "password": "old-pw"}
    assert client.post("/accounts/login/", old).status_code == 429  # locked out
    call_command("bootstrap", "--reset-password")
    out = capsys.readouterr().out
    password = out.strip().splitlines()[-1].removeprefix("  password: ")
    assert password and password != "old-pw"
    admin = django_user_model.objects.get(username="admin")
    assert admin.check_password(password)
    assert not admin.check_password("old-pw")
    login = {"username": "admin", "password": password}
    assert client.post("/accounts/login/", login).status_code == 302


@pytest.mark.django_db
def test_bootstrap_reset_password_of_a_missing_login_says_what_to_do():
    with pytest.raises(CommandError, match="No login 'nobody'"):
        call_command("bootstrap", "--reset-password", "--username", "nobody")


POOL = (
    "from django.conf import settings; d = settings.DATABASES['default']; "
    "print(d.get('OPTIONS', {}).get('pool'), d['CONN_MAX_AGE'], d.get('CONN_HEALTH_CHECKS'))"
)


def _postgres_settings(tmp_path: Path, **env: str):  # type: ignore[no-untyped-def]
    """config.settings read for a PostgreSQL URL (nothing connects)."""
    postgres = "postgres://someone@db.invalid:5432/answers"
    return _settings(tmp_path, "", code=POOL, DJANGO_DEBUG="1", DATABASE_URL=postgres, **env)


def test_postgresql_connections_are_pooled_by_default(tmp_path: Path) -> None:
    done = _postgres_settings(tmp_path)
    assert done.returncode == 0, done.stderr
    # A short wait for a connection (every request's while the database is away), and
    # each borrowed connection checked (a restarted database leaves dead ones behind).
    # And a failed connect given up after 5 s, so the next request retries at once.
    assert done.stdout.split("\n")[0] == (
        "{'min_size': 1, 'max_size': 10, 'timeout': 3, 'reconnect_timeout': 5} 0 True"
    )
    sized = _postgres_settings(tmp_path, DATABASE_POOL_SIZE="25", DATABASE_POOL_TIMEOUT="12")
    assert "'max_size': 25" in sized.stdout
    assert "'timeout': 12" in sized.stdout


def test_persistent_connections_need_the_pool_off(tmp_path: Path) -> None:
    refused = _postgres_settings(tmp_path, DATABASE_CONN_MAX_AGE="60")
    assert refused.returncode != 0
    assert "DATABASE_CONN_MAX_AGE and DATABASE_POOL_SIZE exclude each other" in refused.stderr
    persistent = _postgres_settings(tmp_path, DATABASE_CONN_MAX_AGE="60", DATABASE_POOL_SIZE="0")
    assert persistent.returncode == 0, persistent.stderr
    assert persistent.stdout.split("\n")[0].startswith("None 60")


ENGINE = "from django.conf import settings; print(settings.DATABASES['default']['ENGINE'])"


def test_an_empty_database_url_is_the_default_sqlite_database(tmp_path: Path) -> None:
    result = _settings(tmp_path, "", code=ENGINE, DJANGO_DEBUG="1", DATABASE_URL="")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "django.db.backends.sqlite3"


@pytest.mark.parametrize(
    "url", ["localhost/answers", "postgress://someone:secret@db/answers", "postgres://h:x/db"]
)
def test_a_database_url_that_cannot_be_read_is_named(tmp_path: Path, url: str) -> None:
    result = _settings(tmp_path, "", code=ENGINE, DJANGO_DEBUG="1", DATABASE_URL=url)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: DATABASE_URL is not")
    assert "postgres://user:password@host:5432/name" in last
    assert "secret" not in result.stderr  # a password in the URL is not printed


def test_a_postgresql_url_without_psycopg_says_which_extra_to_install(tmp_path: Path) -> None:
    postgres = "postgres://someone@db.invalid:5432/answers"
    assert _settings(tmp_path, "", code=ENGINE, DJANGO_DEBUG="1", DATABASE_URL=postgres).stdout
    # psycopg as if not installed (the dev extras install it): importing it fails.
    result = _settings(
        tmp_path,
        "",
        code=ENGINE,
        prelude="import sys; sys.modules['psycopg'] = None; ",
        DJANGO_DEBUG="1",
        DATABASE_URL=postgres,
    )
    assert result.returncode != 0
    assert "DATABASE_URL names PostgreSQL, but psycopg is not installed" in result.stderr
    assert '".[postgres]"' in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("DATABASE_POOL_SIZE", "ten", "DATABASE_POOL_SIZE must be a whole number, not 'ten'."),
        ("CHANNEL_CAPACITY", "1e3", "CHANNEL_CAPACITY must be a whole number, not '1e3'."),
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "15m", "DJANGO_LOGIN_COOLOFF_MINUTES must be a number"),
    ],
)
def test_a_variable_that_is_not_a_number_is_named(
    tmp_path: Path, name: str, value: str, says: str
) -> None:
    result = _settings(tmp_path, "", DJANGO_DEBUG="1", **{name: value})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: " + says), last
    # Empty is the default, as for the other variables.
    assert _settings(tmp_path, "", DJANGO_DEBUG="1", **{name: ""}).returncode == 0


PRODUCTION = {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "k" * 50}


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        # A value of the right type that makes no sense is refused too, not taken silently
        # (a negative pool size turned the pool off; a capacity of 0 dropped every message).
        ("DATABASE_POOL_SIZE", "-1", "DATABASE_POOL_SIZE must be at least 0, not '-1'."),
        ("DATABASE_POOL_TIMEOUT", "0", "DATABASE_POOL_TIMEOUT must be at least 1, not '0'."),
        ("DATABASE_CONN_MAX_AGE", "-5", "DATABASE_CONN_MAX_AGE must be at least 0, not '-5'."),
        ("CHANNEL_CAPACITY", "0", "CHANNEL_CAPACITY must be at least 1, not '0'."),
        ("DJANGO_HSTS_SECONDS", "-1", "DJANGO_HSTS_SECONDS must be at least 0, not '-1'."),
        ("DJANGO_LOGIN_FAILURE_LIMIT", "0", "DJANGO_LOGIN_FAILURE_LIMIT must be at least 1"),
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "0", "DJANGO_LOGIN_COOLOFF_MINUTES must be more than 0"),
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "-1", "DJANGO_LOGIN_COOLOFF_MINUTES must be more than"),
        # float() takes these; timedelta() then failed with a bare ValueError/OverflowError.
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "nan", "DJANGO_LOGIN_COOLOFF_MINUTES must be a number"),
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "inf", "DJANGO_LOGIN_COOLOFF_MINUTES must be a number"),
        # logging.config's "Unable to configure root logger" named nothing.
        ("DJANGO_LOG_LEVEL", "LOUD", "DJANGO_LOG_LEVEL must be one of DEBUG, INFO, WARNING"),
        # redis-py reads a database that is not a number as database 0, in silence; a scheme
        # it does not know was said only by migrate's check, without naming the variable.
        ("REDIS_URL", "http://redis.internal:6379/0", "REDIS_URL must be a redis://, rediss://"),
        ("REDIS_URL", "redis://:secret@redis.internal:6379/x", "REDIS_URL's database"),
        # Anything but a true word read as off, even where the default is on: a typo turned
        # the cookies' Secure flag off in silence.
        ("DJANGO_SECURE_COOKIES", "ture", "DJANGO_SECURE_COOKIES must be 1, true, yes, on"),
        ("DJANGO_HSTS_INCLUDE_SUBDOMAINS", "enabled", "DJANGO_HSTS_INCLUDE_SUBDOMAINS must be"),
        # Django matched no request against it: every page a 400, with nothing said.
        ("DJANGO_ALLOWED_HOSTS", "https://answers.example.com", "DJANGO_ALLOWED_HOSTS holds"),
        # Django checks only for a scheme: a trailing slash never matched an Origin, so every
        # form through the proxy was refused (CSRF) and every socket (origin check).
        (
            "DJANGO_CSRF_TRUSTED_ORIGINS",
            "https://answers.example.com/",
            "DJANGO_CSRF_TRUSTED_ORIGINS holds origins",
        ),
    ],
)
def test_a_variable_out_of_its_range_is_named(
    tmp_path: Path, name: str, value: str, says: str
) -> None:
    result = _settings(tmp_path, "", **PRODUCTION, **{name: value})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: " + says), last
    assert "secret" not in result.stderr  # a password in a URL is not printed


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DJANGO_LOG_LEVEL", "debug"),  # as operators write it
        ("DJANGO_LOGIN_COOLOFF_MINUTES", "0.5"),
        ("DATABASE_POOL_SIZE", "0"),
        ("REDIS_URL", "redis://redis.internal:6379/3"),
        ("REDIS_URL", "rediss://user:pw@redis.internal:6380"),
        ("REDIS_URL", "unix:///run/redis.sock?db=2"),
        ("DJANGO_ALLOWED_HOSTS", "answers.example.com, .example.org,[::1]"),
        ("DJANGO_SECURE_COOKIES", "Off"),
        ("DJANGO_HSTS_PRELOAD", " YES "),
        ("DJANGO_CSRF_TRUSTED_ORIGINS", "https://answers.example.com,https://*.example.org:8443"),
    ],
)
def test_a_variable_within_its_range_is_taken(tmp_path: Path, name: str, value: str) -> None:
    result = _settings(tmp_path, "", **PRODUCTION, **{name: value})
    assert result.returncode == 0, result.stderr


def _manage(
    tmp_path: Path, *args: str, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ANSWERS_", "DATABASE_")) and k != "REDIS_URL"
    }
    clean.update(DJANGO_ENV_FILE="", DATABASE_URL=f"sqlite:///{tmp_path / 'unused.sqlite3'}")
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DATABASE_POOL_SIZE": "ten"}, "DATABASE_POOL_SIZE must be a whole number, not 'ten'."),
        ({"ANSWERS_QUESTIONS_PER_MINUTE": "x"}, "ANSWERS_QUESTIONS_PER_MINUTE must be an integer"),
        ({"DJANGO_DEBUG": "0"}, "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off"),
    ],
)
def test_a_bad_variable_stops_manage_py_and_daphne_with_one_line(
    tmp_path: Path, env: dict[str, str], says: str
) -> None:
    """What the operator reads is the one line that names the variable, not forty lines of
    Django's settings import with it at the bottom."""
    env = {"DJANGO_DEBUG": "1", **env}
    for command in (
        ["manage.py", "check"],
        ["-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"],
    ):
        result = _manage(tmp_path, *command, **env)
        assert result.returncode == 1, (command, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"ImproperlyConfigured: {says}"), line


@pytest.mark.parametrize(
    ("url", "says"),
    [
        # dj-database-url reads it, then Django failed loading MySQLdb with a traceback (and
        # there is no search backend for it).
        ("mysql://someone:secret@db/answers", "DATABASE_URL names a mysql database"),
        # An in-memory database: migrate fills one that is gone when it exits, and daphne
        # serves another with no tables.
        ("sqlite://", "DATABASE_URL names an in-memory SQLite database"),
        ("sqlite:///:memory:", "DATABASE_URL names an in-memory SQLite database"),
    ],
)
def test_a_database_this_project_cannot_serve_from_is_named(
    tmp_path: Path, url: str, says: str
) -> None:
    result = _settings(tmp_path, "", code=ENGINE, DJANGO_DEBUG="1", DATABASE_URL=url)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: " + says), last
    assert "secret" not in result.stderr


DAPHNE = ["-m", "daphne", "-b", "127.0.0.1", "-p", "0", "config.asgi:application"]


def test_daphne_refuses_to_start_with_a_setting_the_checks_refuse(tmp_path: Path) -> None:
    """The README says every ANSWERS key is checked at start-up; daphne ran no check, so
    ANSWERS_QUESTIONS_PER_MINUTE=0 served and refused every question ("at most 0 a minute")
    and a provider that cannot be imported failed every answer."""
    try:
        result = _manage(
            tmp_path,
            *DAPHNE,
            timeout=30,
            DJANGO_DEBUG="1",
            ANSWERS_QUESTIONS_PER_MINUTE="0",
            ANSWERS_PROVIDER="no.such.Provider",
        )
    except subprocess.TimeoutExpired:
        pytest.fail("daphne started and served with settings its checks refuse")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "(answers.E004) ANSWERS['QUESTIONS_PER_MINUTE'] must be between 1" in result.stderr
    assert "(answers.E006) ANSWERS['PROVIDER'] = 'no.such.Provider'" in result.stderr
