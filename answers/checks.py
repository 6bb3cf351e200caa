"""System checks for the ``ANSWERS`` settings: bad values fail loudly at start-up."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.cache import caches
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.files.storage import storages
from django.db import connection
from django.utils.module_loading import import_string

from .conf import DEFAULTS, SETTINGS, answers_settings
from .search.base import search_takes_scope

# The method the pipeline calls on each swappable part.
_PART_METHODS = {"PROVIDER": "stream", "SEARCH_BACKEND": "search", "RERANKER": "rerank"}


@register(Tags.compatibility)
def check_answers_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    raw = getattr(settings, "ANSWERS", {})
    if not isinstance(raw, dict):
        return [Error("ANSWERS must be a dict.", id="answers.E001")]
    for key in raw:
        if key not in DEFAULTS:
            errors.append(
                Error(
                    f"Unknown ANSWERS setting {key!r}.",
                    hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                    id="answers.E002",
                )
            )
    for setting in SETTINGS:
        if setting.kind is bool and not isinstance(getattr(answers_settings, setting.name), bool):
            errors.append(
                Error(f"ANSWERS[{setting.name!r}] must be True or False.", id="answers.E003")
            )
        if setting.low is None:
            continue
        key, kind, low, high = setting.name, setting.kind, setting.low, setting.high
        value = getattr(answers_settings, key)
        ok_type = isinstance(value, int | float) if kind is float else isinstance(value, int)
        if isinstance(value, bool) or not ok_type:
            errors.append(Error(f"ANSWERS[{key!r}] must be a {kind.__name__}.", id="answers.E003"))
            continue
        # Written so NaN fails it: NaN compares false with both bounds.
        if not (value >= low and (high is None or value <= high)):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            errors.append(Error(f"ANSWERS[{key!r}] must be {bound}.", id="answers.E004"))
    if (
        not isinstance(answers_settings.NO_ANSWER_MESSAGE, str)
        or not str(answers_settings.NO_ANSWER_MESSAGE).strip()
    ):
        errors.append(
            Error("ANSWERS['NO_ANSWER_MESSAGE'] must be a non-empty string.", id="answers.E005")
        )
    if answers_settings.STREAM_CACHE not in getattr(settings, "CACHES", {"default": {}}):
        errors.append(
            Error(
                f"ANSWERS['STREAM_CACHE'] is {answers_settings.STREAM_CACHE!r}, "
                "which is not an alias in CACHES.",
                hint="Name a cache every process shares (Redis with several processes).",
                id="answers.E008",
            )
        )
    else:
        errors += _check_stream_cache(str(answers_settings.STREAM_CACHE))
    paths = {
        "PROVIDER": answers_settings.provider_path(),
        "SEARCH_BACKEND": answers_settings.search_backend_path(),
    }
    if answers_settings.RERANKER:
        paths["RERANKER"] = str(answers_settings.RERANKER)
    for key, path in paths.items():
        try:
            imported = import_string(path)
        except ImportError as exc:
            errors.append(
                Error(
                    f"ANSWERS[{key!r}] = {path!r} cannot be imported: {exc}",
                    hint="Use a dotted path to a class (or 'extractive' for PROVIDER).",
                    id="answers.E006",
                )
            )
            continue
        method = _PART_METHODS[key]
        if not _is_part_class(imported, method):
            errors.append(
                Error(
                    f"ANSWERS[{key!r}] = {path!r} is not a class with a {method}() method.",
                    hint="Use a dotted path to a class (or 'extractive' for PROVIDER).",
                    id="answers.E009",
                )
            )
            continue
        # Each part validates its own settings (as staticfiles asks its finders).
        if callable(getattr(imported, "check", None)):
            errors += imported.check()
        if key == "SEARCH_BACKEND":
            errors += _check_search_backend_vendor(path, imported)
            errors += _check_search_backend_scope(path, imported)
        if key == "PROVIDER" and answers_settings.REWRITE_FOLLOWUPS:
            errors += _check_provider_rewrites(path, imported)
    return errors


def _is_part_class(imported: Any, method: str) -> bool:
    """Not a module, a class of another kind or the interface itself: the first question
    would fail building or calling it."""
    return (
        inspect.isclass(imported)
        and not getattr(imported, "_is_protocol", False)
        and callable(getattr(imported, method, None))
    )


def _check_provider_rewrites(path: str, provider: Any) -> list[CheckMessage]:
    if callable(getattr(provider, "rewrite", None)):
        return []
    return [
        Warning(
            f"ANSWERS['REWRITE_FOLLOWUPS'] is on, but the provider {path!r} cannot rewrite "
            "questions: follow-ups are searched as they are, with the turn before.",
            hint="Use a provider with a rewrite() method (openai), or turn it off.",
            id="answers.W002",
        )
    ]


def _check_search_backend_vendor(path: str, backend: Any) -> list[CheckMessage]:
    """A built-in backend's index exists only on its own database (migrations 0002, 0004)."""
    # Only the vendor name from settings: no connection is opened.
    needed = getattr(backend, "vendor", None)
    if needed is None or needed == connection.vendor:
        return []
    return [
        Error(
            f"The search backend {path!r} needs a {needed} database, "
            f"but the default database is {connection.vendor}.",
            hint="Leave ANSWERS['SEARCH_BACKEND'] unset to get the built-in backend for "
            "SQLite or PostgreSQL, or set a backend written for this database.",
            id="answers.E007",
        )
    ]


def _check_search_backend_scope(path: str, backend: Any) -> list[CheckMessage]:
    """A backend must search only the asker's documents, statistics included (ADR 0009)."""
    if search_takes_scope(backend):
        return []
    return [
        Error(
            f"The search backend {path!r} does not accept the documents= keyword of "
            "search(): its hits, order and scores would depend on documents the asker "
            "may not view.",
            hint="Accept documents (a Document queryset), search only their chunks and "
            "compute the score's statistics over them (docs/scores.md). Silencing "
            "answers.E013 searches everything; sources the asker may not view are still "
            "dropped afterwards, but scores leak.",
            id="answers.E013",
        )
    ]


# An answer logs one entry per event (a few hundred), and several stream at once.
MIN_LOCAL_STREAM_CACHE_ENTRIES = 10_000


def _check_stream_cache(alias: str) -> list[CheckMessage]:
    config = settings.CACHES[alias]
    if not str(config.get("BACKEND", "")).endswith("locmem.LocMemCache"):
        return []
    entries = int(config.get("OPTIONS", {}).get("MAX_ENTRIES", 300))
    if entries >= MIN_LOCAL_STREAM_CACHE_ENTRIES:
        return []
    return [
        Warning(
            f"The stream cache {alias!r} is a local-memory cache of {entries} entries: "
            "the stream logs of answers streaming at once evict each other, and clients "
            "that resume get gaps.",
            hint=f"Give it OPTIONS {{'MAX_ENTRIES': {MIN_LOCAL_STREAM_CACHE_ENTRIES * 20}}} "
            "or more, or use Redis (docs/deployment.md).",
            id="answers.W001",
        )
    ]


# Connections PostgreSQL keeps for superusers and for the people who keep the database.
RESERVED_CONNECTIONS = 5


def database_threads_per_process() -> int:
    """Threads of one process that hold a database connection while answers stream: the
    thread all database work shares, and one per retrieval thread (PostgreSQL only:
    ``RETRIEVAL_THREADS``). HTTP requests in flight add one each."""
    threads = int(answers_settings.RETRIEVAL_THREADS) if connection.vendor == "postgresql" else 0
    return 1 + threads


def database_pool_size() -> int | None:
    """The most connections the process's pool opens (``DATABASE_POOL_SIZE``), or None
    when connections are not pooled."""
    pool = connection.settings_dict.get("OPTIONS", {}).get("pool")
    if not pool:
        return None
    # Without max_size psycopg_pool's pool holds min_size connections, 4 by default.
    return int(pool["max_size"]) if isinstance(pool, dict) and "max_size" in pool else 4


def database_connections_per_process() -> int:
    """What one process may hold open at once: its pool's size when pooled, else one per
    thread that works with the database (``database_threads_per_process``)."""
    pooled = database_pool_size()
    return pooled if pooled is not None else database_threads_per_process()


# Seconds a check waits for PostgreSQL to accept a connection.
CONNECT_TIMEOUT = 5


def check_database_opens(database: Any) -> list[CheckMessage]:
    """Can ``database`` (a connection wrapper) be opened? Said once, naming DATABASE_URL,
    instead of a traceback: with the pool, PostgreSQL's would come after the pool's 30 s
    timeout and say only that no connection came."""
    try:
        if database.vendor == "postgresql":
            # Straight to the server, past the pool, so the server's own reason shows.
            import psycopg

            params = database.get_connection_params()
            psycopg.connect(**params, connect_timeout=CONNECT_TIMEOUT).close()
        else:
            database.ensure_connection()
    except Exception as exc:
        return [
            Error(
                f"The database {database.alias!r} cannot be opened: {exc}",
                hint="Check DATABASE_URL (docs/environment.md): the server, its port, the "
                "database name and the user's password, or the SQLite file's folder.",
                id="answers.E031",
            )
        ]
    return []


@register(Tags.database)
def check_database_connections(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """With ``--database default`` (``migrate`` runs it): can PostgreSQL carry one process,
    and how many can it carry? (docs/deployment.md, "Sizing")."""
    if not databases or "default" not in databases:
        return []
    unopened = check_database_opens(connection)
    if unopened or connection.vendor != "postgresql":
        return unopened
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        (row,) = cursor.fetchall()
    usable = int(row[0]) - RESERVED_CONNECTIONS
    each = database_connections_per_process()
    messages: list[CheckMessage] = []
    if each > usable:
        what = (
            "DATABASE_POOL_SIZE"
            if database_pool_size() is not None
            else "1 + RETRIEVAL_THREADS, unpooled"
        )
        messages.append(
            Error(
                f"One process may open {each} database connections ({what}) "
                f"but PostgreSQL's max_connections leaves {usable}.",
                hint="Lower DATABASE_POOL_SIZE or ANSWERS['RETRIEVAL_THREADS'], or raise "
                "max_connections.",
                id="answers.E030",
            )
        )
    pooled = database_pool_size()
    if pooled is not None and pooled < database_threads_per_process():
        messages.append(
            Warning(
                f"The database pool holds {pooled} connections but "
                f"{database_threads_per_process()} threads work with the database at once "
                "(1 + RETRIEVAL_THREADS): answers wait for each other's connections.",
                hint="Raise DATABASE_POOL_SIZE to at least 1 + RETRIEVAL_THREADS, plus the "
                "HTTP requests you expect in flight.",
                id="answers.W003",
            )
        )
    return messages


@register(Tags.staticfiles, deploy=True)
def check_static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With a manifest storage (the shipped project with DEBUG off) every page names its
    assets through collectstatic's manifest: without it each page is a 500 ("Missing
    staticfiles manifest entry"), and nothing else says so before a user does."""
    storage = storages["staticfiles"]
    if not isinstance(storage, ManifestFilesMixin) or storage.read_manifest() is not None:
        return []
    return [
        Error(
            f"The static files are not collected: {storage.manifest_name} is missing from "
            "STATIC_ROOT, so every page would fail (500).",
            hint="Run manage.py collectstatic --noinput, once per release (docs/deployment.md).",
            id="answers.E018",
        )
    ]


# Shown with the errors below: in the shipped project both live in REDIS_URL's Redis.
_REDIS_HINT = (
    "In the shipped project both are REDIS_URL's Redis: check the URL and that Redis runs, "
    "or leave REDIS_URL empty for one process (docs/deployment.md)."
)


@register(Tags.compatibility)
def check_channel_layer(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every answer streams through the channel layer: one that cannot be built would
    refuse every question (503 ``unavailable``) with nothing said at start-up."""
    try:
        get_channel_layer()
    except Exception as exc:  # channels wraps the ImportError, which says what is missing
        cause = f" ({exc.__context__})" if isinstance(exc.__context__, ImportError) else ""
        return [
            Error(
                f"The channel layer cannot be built: {exc}{cause}.",
                hint="With REDIS_URL set, install the redis extra: "
                '.venv/bin/pip install -e ".[redis]" (docs/deployment.md).',
                id="answers.E014",
            )
        ]
    return []


# A check that connects gives up after this long, so `migrate` reports rather than hangs.
SERVICE_TIMEOUT = 5.0


@register(Tags.database)
def check_stream_services(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """With ``--database default`` (``migrate`` runs it, so ``make run`` does), as for
    the database: do the stream cache and the channel layer answer? If not, every question
    would be refused (503 ``unavailable``) with nothing said at start-up."""
    if not databases or "default" not in databases:
        return []
    messages: list[CheckMessage] = []
    alias = str(answers_settings.STREAM_CACHE)
    if alias in settings.CACHES:  # else answers.E008
        cache = caches.create_connection(alias)
        try:
            cache.get("answers:check")
        except Exception as exc:
            messages.append(
                Error(
                    f"The stream cache {alias!r} does not answer: {exc}",
                    hint=_REDIS_HINT,
                    id="answers.E016",
                )
            )
        finally:
            cache.close()
    try:
        layer = get_channel_layer()
    except Exception:  # answers.E014
        return messages
    if layer is not None and not isinstance(layer, InMemoryChannelLayer):
        try:
            async_to_sync(_channel_layer_answers)(layer)
        except Exception as exc:
            messages.append(
                Error(
                    f"The channel layer does not answer: {str(exc) or type(exc).__name__}",
                    hint=_REDIS_HINT,
                    id="answers.E015",
                )
            )
    return messages


async def _channel_layer_answers(layer: BaseChannelLayer) -> None:
    try:
        # A round trip that changes nothing: leave a group nobody is in.
        await asyncio.wait_for(
            layer.group_discard("answers.check", "answers.check!"), SERVICE_TIMEOUT
        )
    finally:
        # Its connections belong to this call's event loop, which ends with it.
        close_pools = getattr(layer, "close_pools", None)
        if close_pools is not None:
            await close_pools()


def serving_errors() -> list[CheckMessage]:
    """What the app's own settings checks refuse, for a server about to start
    (config/asgi.py): daphne runs no system check, so a bad ``ANSWERS`` value would be
    found only by the questions it fails. The database-tagged checks, which connect, stay
    with ``migrate`` and ``check --database default``."""
    return [
        message
        for message in (*check_answers_settings(), *check_channel_layer())
        if message.is_serious()
    ]
