"""Site settings for running Cited Answers as a project.

Everything deployment-specific comes from the environment: docs/environment.md.
"""

from __future__ import annotations

import math
import os
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from answers.conf import settings_from_environment

BASE_DIR = Path(__file__).resolve().parent.parent

# `make run` writes a git-ignored `.env` (DJANGO_DEBUG=1), so every `manage.py` command in
# this folder gets the development set-up it serves with; variables already set win over
# it. DJANGO_ENV_FILE names another file, or (empty) none: tests/settings.py reads none.
# Production has no `.env`, so it still refuses to start without DJANGO_SECRET_KEY.
_ENV_FILE = os.environ.get("DJANGO_ENV_FILE", str(BASE_DIR / ".env"))
if _ENV_FILE:
    # A file named on purpose must be there: skipped in silence, its variables would be
    # missed with an error about them ("DJANGO_SECRET_KEY must be set"), not about it.
    named = "DJANGO_ENV_FILE" in os.environ
    if named and not (os.path.isfile(_ENV_FILE) and os.access(_ENV_FILE, os.R_OK)):
        raise ImproperlyConfigured(
            f"DJANGO_ENV_FILE names {_ENV_FILE}, which cannot be read (set it empty to read none)."
        )
    load_dotenv(_ENV_FILE, override=False)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_bool(name: str, default: bool = False) -> bool:
    """On or off (empty: the default). Any other word stops start-up: read as off, a typo
    turned off what defaults to on (DJANGO_SECURE_COOKIES=ture: cookies without Secure)."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in _TRUE + _FALSE:
        raise ImproperlyConfigured(
            f"{name} must be {', '.join(_TRUE)} or {', '.join(_FALSE)}, not {os.environ[name]!r}."
        )
    return value in _TRUE


def env_int(name: str, default: int, *, low: int | None = None) -> int:
    """A whole number from the environment (empty: the default); anything else, or one
    under ``low``, stops start-up naming the variable, not with int()'s bare ValueError or
    a value that makes no sense taken in silence (a negative pool size, a capacity of 0)."""
    value = os.environ.get(name, "").strip()
    try:
        number = int(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if low is not None and number < low:
        raise ImproperlyConfigured(f"{name} must be at least {low}, not {value!r}.")
    return number


def env_float(name: str, default: float, *, above: float | None = None) -> float:
    """A finite number from the environment (empty: the default), more than ``above``:
    float() also takes "nan" and "inf", which then fail far from here (timedelta)."""
    value = os.environ.get(name, "").strip()
    try:
        number = float(value) if value else default
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}.")
    if above is not None and number <= above:
        raise ImproperlyConfigured(f"{name} must be more than {above:g}, not {value!r}.")
    return number


def env_hosts(name: str, default: str = "") -> list[str]:
    """Host names: Django matches no request against a URL or a path, so every page would
    be a 400 with nothing said at start-up."""
    hosts = env_list(name, default)
    for host in hosts:
        if "/" in host:
            raise ImproperlyConfigured(
                f"{name} holds host names (answers.example.com), not URLs or paths: {host!r}."
            )
    return hosts


def env_origins(name: str) -> list[str]:
    """Origins, scheme and host (and port) only: Django checks for the scheme, but one with
    a path (a trailing slash) never equals a request's Origin, so every form and socket
    through the proxy would be refused."""
    origins = env_list(name)
    for origin in origins:
        parts = urlsplit(origin)
        if (
            parts.scheme not in {"http", "https"}
            or not parts.netloc
            or parts.path
            or parts.query
            or parts.fragment
        ):
            raise ImproperlyConfigured(
                f"{name} holds origins, a scheme and a host only "
                f"(https://answers.example.com), not {origin!r}."
            )
    return origins


def env_log_level(name: str, default: str) -> str:
    """A level name, in any case: logging.config's own error ("Unable to configure root
    logger") names nothing."""
    value = os.environ.get(name, "").strip().upper() or default
    levels = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    if value not in levels:
        raise ImproperlyConfigured(
            f"{name} must be one of {', '.join(levels)}, not {os.environ[name]!r}."
        )
    return value


def env_redis_url(name: str) -> str:
    """A URL redis-py reads as meant, or empty. Not echoed: it may hold a password."""
    url = os.environ.get(name, "").strip()
    if not url:
        return ""
    parsed = urlsplit(url)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name} must be a redis://, rediss:// or unix:// URL, e.g. "
            "redis://redis.internal:6379/0."
        )
    # redis-py reads a database that is not a number as database 0, in silence.
    database = parsed.path.strip("/") if parsed.scheme != "unix" else ""
    if database and not database.isdigit():
        raise ImproperlyConfigured(
            f"{name}'s database (the path after host:port) must be a number, e.g. "
            "redis://redis.internal:6379/0."
        )
    return url


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DJANGO_DEBUG")


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY", "")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off "
            "(a development key is generated only with DJANGO_DEBUG=1)."
        )
    # A dev key that survives restarts, so logins do too; never used with DEBUG off.
    key_file = BASE_DIR / ".secret_key"
    if key_file.exists():
        return key_file.read_text().strip()
    key = secrets.token_urlsafe(50)
    key_file.write_text(key)
    key_file.chmod(0o600)
    return key


SECRET_KEY = _secret_key()

ALLOWED_HOSTS = env_hosts("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG else "")
CSRF_TRUSTED_ORIGINS = env_origins("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # serves the API docs' assets locally, so they run under the CSP
    "template_partials",
    "axes",  # login throttling; its admin lists attempts and lockouts
    "answers",
]

MIDDLEWARE = [
    # First: a load balancer's probe of /health/live and /health/ready is answered before
    # the host is validated or https required (docs/deployment.md).
    "answers.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

# Logins (the login page and the admin's) are throttled by django-axes: after
# DJANGO_LOGIN_FAILURE_LIMIT wrong passwords for one username from one address, that
# username is refused from that address, right password or not, for
# DJANGO_LOGIN_COOLOFF_MINUTES. A successful login clears the count. Keyed by username
# and address together, so nobody can lock a user out from elsewhere; the price is that a
# few guesses at each of many usernames from one address are not throttled.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: a locked-out login is refused early
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("DJANGO_LOGIN_FAILURE_LIMIT", 5, low=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("DJANGO_LOGIN_COOLOFF_MINUTES", 15, above=0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "config.auth.login_client_ip"
AXES_LOCKOUT_CALLABLE = "config.auth.login_locked_out"
AXES_HTTP_RESPONSE_CODE = 429
# Not verbose: no "AXES: BEGIN version ..." line at every process start (each manage.py
# command, each ingest worker), and lockout lines name only what locks (username and IP).
AXES_VERBOSE = False

ROOT_URLCONF = "config.urls"
# A refused form gets the site's page that says why and what to do (config/views.py).
CSRF_FAILURE_VIEW = "config.views.csrf_failure"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "config.asgi.application"


def _database() -> dj_database_url.DBConfig:
    """DATABASE_URL as Django's settings. A URL it cannot use stops start-up with an error
    that names the variable, not dj-database-url's or the driver's traceback (nor a
    KeyError for an empty one)."""
    # Empty counts as unset, as for the other variables here.
    url = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
    conn_max_age = env_int("DATABASE_CONN_MAX_AGE", 0, low=0)
    try:
        database = dj_database_url.parse(url, conn_max_age=conn_max_age)
    except ValueError as exc:  # the URL is not echoed: it may hold a password
        reason = str(exc).split(". ")[0].rstrip(".")  # not the list of every scheme known
        raise ImproperlyConfigured(
            f"DATABASE_URL is not a database URL this project can read ({reason}). Use "
            "sqlite:///path/to/db.sqlite3 or postgres://user:password@host:5432/name."
        ) from None
    engine = str(database["ENGINE"])
    if engine not in {"django.db.backends.sqlite3", "django.db.backends.postgresql"}:
        # Django's own error (a driver missing) is a traceback, and neither search index
        # (answers/search/) exists for another database.
        raise ImproperlyConfigured(
            f"DATABASE_URL names a {engine.rsplit('.', 1)[-1]} database; this project runs "
            "on SQLite (sqlite:///path/to/db.sqlite3) or PostgreSQL "
            "(postgres://user:password@host:5432/name)."
        )
    if engine.endswith("sqlite3") and str(database.get("NAME") or ":memory:") == ":memory:":
        # migrate would fill a database gone when it exits; daphne would serve another.
        raise ImproperlyConfigured(
            "DATABASE_URL names an in-memory SQLite database, which lasts one process: "
            "use a file, sqlite:////absolute/path/db.sqlite3."
        )
    if database["ENGINE"] == "django.db.backends.postgresql":
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise ImproperlyConfigured(
                "DATABASE_URL names PostgreSQL, but psycopg is not installed: "
                '.venv/bin/pip install -e ".[postgres]" (docs/deployment.md).'
            ) from None
    return database


DATABASES = {"default": _database()}
# PostgreSQL: a pool of connections per process (psycopg_pool, Django's "pool" option),
# so an answer's many short database calls reuse connections instead of opening one each
# (a PostgreSQL backend process forked per call), and the process never holds more than
# DATABASE_POOL_SIZE however many threads ask; a thread over the limit waits for one.
# 0 turns the pool off (then DATABASE_CONN_MAX_AGE applies). Sizing: docs/deployment.md.
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 10, low=0)
DATABASE_POOL_TIMEOUT = env_int("DATABASE_POOL_TIMEOUT", 3, low=1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DATABASE_POOL_SIZE > 0:
    if DATABASES["default"].get("CONN_MAX_AGE"):
        raise ImproperlyConfigured(
            "DATABASE_CONN_MAX_AGE and DATABASE_POOL_SIZE exclude each other: the pool keeps "
            "connections open; set DATABASE_POOL_SIZE=0 to use persistent connections instead."
        )
    # Each borrowed connection is checked first (one empty query, a round trip of well
    # under a millisecond): after the database went away and came back, the pool's idle
    # connections are dead, and without the check each would fail one request.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DATABASE_POOL_SIZE,
        # A thread waits this long for a connection before its request is refused (the API:
        # 503 with Retry-After). Short, because every request pays the whole wait while the
        # database refuses connections (the pool keeps reconnecting in the background); a
        # healthy pool lends one in milliseconds, so seconds without one is an outage or an
        # overload either way, and "ask again" beats a client's own timeout. And under
        # daphne's WebSocket handshake timeout (5 s): a socket whose session cannot be read
        # is still accepted to be told "unavailable". Raise it when long queries hold every
        # connection (a burst then waits longer rather than fail).
        "timeout": DATABASE_POOL_TIMEOUT,
        # psycopg_pool retries a failed connect with a doubling delay until this many
        # seconds have passed (300 by default): after a long outage its next try could come
        # minutes after the database was back, every request refused meanwhile (17-19 s
        # after outages of 45 and 100 s). Given up after 5 s, the next request that finds
        # the pool short starts a new try at once (ADR 0041).
        "reconnect_timeout": 5,
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the streaming writer and readers overlap; the timeout rides out short locks.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(BASE_DIR / "test-db.sqlite3")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# Answers stream through the channel layer (docs/deployment.md): one process needs nothing
# more; several processes share Redis. capacity: unread messages a channel holds before
# group_send drops more (a follower that misses one re-reads the stream log); expiry:
# seconds an unread message lives; group_expiry: seconds a membership outlives a process
# that died without leaving (longer than any answer can stream).
REDIS_URL = env_redis_url("REDIS_URL")
CHANNEL_CAPACITY = env_int("CHANNEL_CAPACITY", 1000, low=1)
CHANNEL_LAYERS: dict[str, dict[str, Any]]
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [REDIS_URL],
                "prefix": os.environ.get("CHANNEL_PREFIX", "answers"),
                "capacity": CHANNEL_CAPACITY,
                "expiry": 60,
                "group_expiry": 900,
            },
        }
    }
    # The stream log (answers/streams/log.py) lives in the cache, so every process reads it.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": os.environ.get("CACHE_PREFIX", "answers"),
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_CAPACITY, "expiry": 60, "group_expiry": 900},
        }
    }
    # Every streamed event is an entry of the stream log: Django's default of 300 entries
    # would evict the logs of a few answers streaming at once.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "OPTIONS": {"MAX_ENTRIES": 200_000},
        }
    }

# Nothing the model or a document wrote can run: scripts, styles, images and connections
# come from this site only ('self' also covers its ws:/wss: in current browsers).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
    SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0, low=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
    SECURE_PROXY_SSL_HEADER = (
        ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("DJANGO_BEHIND_TLS_PROXY") else None
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_log_level("DJANGO_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# App settings: every key is optional; defaults and meaning are in answers/conf.py
# (docs/settings.md). The environment sets the keys declared there with an `env`.
ANSWERS: dict[str, object] = dict(settings_from_environment(os.environ))
