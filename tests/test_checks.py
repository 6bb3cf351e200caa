from __future__ import annotations

import pytest
from django.db import connection

from answers.checks import check_answers_settings


def ids(settings_value, settings):  # type: ignore[no-untyped-def]
    settings.ANSWERS = settings_value
    return sorted(e.id for e in check_answers_settings())


def test_defaults_pass(settings):
    assert ids({}, settings) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"NOPE": 1}, "answers.E002"),
        ({"SCORE_THRESHOLD": "high"}, "answers.E003"),
        ({"SCORE_THRESHOLD": 1.5}, "answers.E004"),
        ({"MAX_SOURCES": 0}, "answers.E004"),
        ({"MAX_SOURCES": True}, "answers.E003"),
        ({"NO_ANSWER_MESSAGE": "  "}, "answers.E005"),
        ({"PROVIDER": "no.such.Provider"}, "answers.E006"),
        ({"SEARCH_BACKEND": "answers.nothing.Backend"}, "answers.E006"),
        # Imported, but the first question would fail building or calling it.
        ({"PROVIDER": "os.path"}, "answers.E009"),
        ({"PROVIDER": "json.JSONDecoder"}, "answers.E009"),
        ({"PROVIDER": "answers.providers.base.Provider"}, "answers.E009"),
        ({"SEARCH_BACKEND": "answers.search.base"}, "answers.E009"),
        ({"RERANKER": "answers.rerankers.RerankerError"}, "answers.E009"),
        ({"STREAM_LOG_TTL": 0}, "answers.E004"),
        ({"STREAM_POLL_INTERVAL": "soon"}, "answers.E003"),
        ({"STREAM_CACHE": "nowhere"}, "answers.E008"),
        # NaN compares false with both bounds, so it passed (ANSWERS_SHUTDOWN_GRACE=nan).
        ({"SHUTDOWN_GRACE": float("nan")}, "answers.E004"),
        ({"NEAR_DUPLICATE_SIMILARITY": float("nan")}, "answers.E004"),
        ({"SCORE_THRESHOLD": float("inf")}, "answers.E004"),
        # The first question would fail, with nothing said at start-up.
        (
            {"PROVIDER": "openai", "MODEL": "m", "OPENAI_BASE_URL": "gpu-box:8000/v1"},
            "answers.E017",
        ),
        (
            {"PROVIDER": "openai", "MODEL": "m", "OPENAI_BASE_URL": "ftp://gpu-box/v1"},
            "answers.E017",
        ),
        ({"PROVIDER": "openai", "MODEL": "m", "OPENAI_BASE_URL": "http:///v1"}, "answers.E017"),
    ],
)
def test_bad_values_are_reported(settings, value, expected):
    assert expected in ids(value, settings)


def test_settings_are_reread_when_changed(settings):
    from answers.conf import answers_settings

    settings.ANSWERS = {"MAX_SOURCES": 3}
    assert answers_settings.MAX_SOURCES == 3
    settings.ANSWERS = {}
    assert answers_settings.MAX_SOURCES == 6


_BACKENDS = {
    "sqlite": "answers.search.sqlite_fts5.SQLiteFTS5Backend",
    "postgresql": "answers.search.postgres.PostgreSQLBackend",
}


def test_the_default_search_backend_fits_the_database(settings):
    from django.db import connection

    from answers.conf import answers_settings

    settings.ANSWERS = {}
    assert answers_settings.search_backend_path() == _BACKENDS[connection.vendor]
    assert "answers.E007" not in ids({"SEARCH_BACKEND": _BACKENDS[connection.vendor]}, settings)


def test_a_search_backend_for_another_database_is_reported(settings):
    from django.db import connection

    (other,) = (path for vendor, path in _BACKENDS.items() if vendor != connection.vendor)
    assert "answers.E007" in ids({"SEARCH_BACKEND": other}, settings)


class BackendOfOurOwn:
    """A custom backend; it does not say which database it needs (``vendor`` is optional)."""

    name = "own"

    def search(self, query: str, *, limit: int, documents: object = None) -> list[object]:
        return []


class UnscopedBackend:
    """A backend written before searches were scoped: it searches every document."""

    name = "unscoped"

    def search(self, query: str, *, limit: int) -> list[object]:
        return []


def test_a_backend_that_names_no_database_is_not_second_guessed(settings):
    assert ids({"SEARCH_BACKEND": "tests.test_checks.BackendOfOurOwn"}, settings) == []


def test_a_backend_that_cannot_scope_its_search_is_refused(settings):
    # Its scores and candidates would depend on documents the asker may not view.
    assert ids({"SEARCH_BACKEND": "tests.test_checks.UnscopedBackend"}, settings) == [
        "answers.E013"
    ]


def test_a_small_local_memory_stream_cache_is_warned_about(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert ids({}, settings) == ["answers.W001"]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "OPTIONS": {"MAX_ENTRIES": 200_000},
        }
    }
    assert ids({}, settings) == []


def test_the_environment_sets_the_limits_with_their_types_and_bounds(settings):
    from django.core.exceptions import ImproperlyConfigured

    from answers.conf import settings_from_environment

    environ = {
        "ANSWERS_MAX_CONCURRENT_STREAMS": "3",
        "ANSWERS_QUESTIONS_PER_MINUTE": "7",
        "ANSWERS_EXTRACTIVE_DELAY": "0.5",
        "ANSWERS_MODEL": "",  # empty sets nothing
    }
    assert settings_from_environment(environ) == {
        "MAX_CONCURRENT_STREAMS": 3,
        "QUESTIONS_PER_MINUTE": 7,
        "EXTRACTIVE_DELAY": 0.5,
    }
    with pytest.raises(ImproperlyConfigured, match="ANSWERS_QUESTIONS_PER_MINUTE must be an"):
        settings_from_environment({"ANSWERS_QUESTIONS_PER_MINUTE": "lots"})
    # In range is the system check's job, as for a value in settings.
    assert ids(settings_from_environment({"ANSWERS_QUESTIONS_PER_MINUTE": "0"}), settings) == [
        "answers.E004"
    ]


def test_the_openai_server_and_key_come_from_the_environment_into_settings():
    from answers.conf import settings_from_environment

    environ = {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "OPENAI_API_KEY": "k"}
    assert settings_from_environment(environ) == {
        "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
        "OPENAI_API_KEY": "k",
    }


def test_the_provider_reads_only_settings_not_the_environment(settings, monkeypatch):
    from answers.providers.openai import openai_api_key

    monkeypatch.setenv("OPENAI_API_KEY", "from-the-environment")
    settings.ANSWERS = {"PROVIDER": "openai", "MODEL": "m"}
    assert openai_api_key() == ""
    assert "answers.E012" in ids({"PROVIDER": "openai", "MODEL": "m"}, settings)


def test_the_settings_reference_in_docs_is_generated_from_the_declarations():
    from pathlib import Path

    from answers.conf import settings_reference

    docs = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
    assert docs.read_text() == settings_reference(), (
        "docs/settings.md is stale: python manage.py answers_settings > docs/settings.md"
    )


def test_every_setting_is_declared_once_with_a_doc_and_numbers_with_bounds():
    from answers.conf import DEFAULTS, SETTINGS

    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names)) == len(DEFAULTS)
    for setting in SETTINGS:
        assert setting.doc.strip(), setting.name
        is_number = isinstance(setting.default, int | float) and not isinstance(
            setting.default, bool
        )
        # A number without bounds would go unchecked at start-up.
        assert is_number == (setting.low is not None), setting.name


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [("CANDIDATES", 1, 1000), ("SCORE_THRESHOLD", 0.0, 1.0), ("STREAM_LOG_TTL", 1, 604800)],
)
def test_declared_bounds_are_the_ones_checked(settings, key, low, high):
    assert ids({key: low}, settings) == []
    assert ids({key: high}, settings) == []
    assert ids({key: high + 1}, settings) == ["answers.E004"]
    assert ids({key: low - 1}, settings) == ["answers.E004"]


def test_changing_settings_resets_the_parts_without_conf_importing_the_registry(settings):
    import ast
    from pathlib import Path

    from answers import registry

    source = (Path(registry.__file__).parent / "conf.py").read_text()
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not any("registry" in name for name in imported)
    first = registry.get_provider()
    settings.ANSWERS = {"EXTRACTIVE_SENTENCES": 2}
    assert registry.get_provider() is not first


def _usable_connections() -> int:
    from answers.checks import RESERVED_CONNECTIONS

    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        return int(cursor.fetchone()[0]) - RESERVED_CONNECTIONS


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
def test_a_pool_beyond_what_postgresql_allows_is_an_error(monkeypatch):
    from answers.checks import check_database_connections

    allowed = _usable_connections()
    pool = connection.settings_dict["OPTIONS"]["pool"]  # on by default (DATABASE_POOL_SIZE)
    assert check_database_connections(databases=["default"]) == []
    monkeypatch.setitem(pool, "max_size", allowed + 1)
    (error,) = check_database_connections(databases=["default"])
    assert error.id == "answers.E030" and f"leaves {allowed}" in error.msg
    assert "DATABASE_POOL_SIZE" in error.msg
    assert check_database_connections(databases=None) == []  # not asked for the database


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
def test_a_pool_smaller_than_the_threads_using_it_is_a_warning(settings, monkeypatch):
    from answers.checks import check_database_connections

    settings.ANSWERS = {**settings.ANSWERS, "RETRIEVAL_THREADS": 4}
    monkeypatch.setitem(connection.settings_dict["OPTIONS"]["pool"], "max_size", 4)
    (warning,) = check_database_connections(databases=["default"])
    assert warning.id == "answers.W003" and "holds 4 connections but 5 threads" in warning.msg
    monkeypatch.setitem(connection.settings_dict["OPTIONS"]["pool"], "max_size", 5)
    assert check_database_connections(databases=["default"]) == []


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL setting")
def test_unpooled_retrieval_threads_beyond_what_postgresql_allows_are_an_error(
    settings, monkeypatch
):
    from answers.checks import check_database_connections

    allowed = _usable_connections()
    monkeypatch.delitem(connection.settings_dict["OPTIONS"], "pool")
    settings.ANSWERS = {**settings.ANSWERS, "RETRIEVAL_THREADS": 4}
    assert check_database_connections(databases=["default"]) == []
    settings.ANSWERS = {**settings.ANSWERS, "RETRIEVAL_THREADS": allowed}
    (error,) = check_database_connections(databases=["default"])
    assert error.id == "answers.E030" and f"leaves {allowed}" in error.msg
    assert "unpooled" in error.msg


def test_a_channel_layer_that_cannot_be_built_is_an_error(settings):
    from answers.checks import check_channel_layer

    assert check_channel_layer() == []
    # As with REDIS_URL set but the redis extra not installed.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_missing.core.RedisChannelLayer"}}
    (error,) = check_channel_layer()
    assert error.id == "answers.E014"
    assert "channels_missing.core.RedisChannelLayer" in error.msg
    assert "No module named 'channels_missing'" in error.msg
    assert '".[redis]"' in error.hint


NOBODY = "redis://127.0.0.1:1/0"  # a port nothing listens on


def test_a_stream_cache_and_a_channel_layer_that_do_not_answer_are_errors(settings):
    from answers.checks import check_stream_services

    assert check_stream_services(databases=["default"]) == []  # the test settings' own
    settings.CACHES = {
        **settings.CACHES,
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": NOBODY},
    }
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [NOBODY]},
        }
    }
    # Only when asked to connect (`check --database default`, `migrate`), as for the database.
    assert check_stream_services(databases=None) == []
    messages = check_stream_services(databases=["default"])
    assert sorted(m.id for m in messages) == ["answers.E015", "answers.E016"]
    assert all("REDIS_URL" in m.hint for m in messages)


@pytest.mark.django_db
def test_a_database_that_cannot_be_opened_is_one_error_naming_database_url(settings):
    import copy

    from django.db import connections

    from answers.checks import check_database_connections, check_database_opens

    assert check_database_opens(connection) == []
    assert check_database_connections(databases=["default"]) == []
    # A wrapper of its own over a copy: the settings of the real one stay as they are.
    real = connections["default"]
    unreachable = type(real)(copy.deepcopy(real.settings_dict), "default")
    if connection.vendor == "sqlite":
        unreachable.settings_dict["NAME"] = "/nonexistent-folder/db.sqlite3"
        reason = "unable to open database file"
    else:
        unreachable.settings_dict["PORT"] = 1  # nothing listens there
        unreachable.settings_dict["OPTIONS"].pop("pool", None)
        reason = "Connection refused"
    try:
        (error,) = check_database_opens(unreachable)
    finally:
        unreachable.close()
    assert error.id == "answers.E031" and reason in error.msg
    assert "DATABASE_URL" in error.hint


def test_the_reranker_and_the_rewrite_are_configured_from_the_environment(settings):
    """A deployment configured by its environment can turn on the HTTP reranker and the
    follow-up rewrite without a settings module of its own (docs/environment.md)."""
    from answers.conf import settings_from_environment

    environ = {
        "ANSWERS_RERANKER": "answers.rerankers.HttpReranker",
        "ANSWERS_RERANK_URL": "http://10.0.0.7:8080/rerank",
        "ANSWERS_RERANK_API": "tei",
        "ANSWERS_RERANK_MODEL": "BAAI/bge-reranker-base",
        "ANSWERS_RERANK_API_KEY": "k",
        "ANSWERS_RERANK_TIMEOUT": "2.5",
        "ANSWERS_RERANK_THREADS": "4",
        "ANSWERS_REWRITE_FOLLOWUPS": "on",
        "ANSWERS_PROVIDER": "openai",  # a provider that can rewrite
        "ANSWERS_MODEL": "m",
        "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
    }
    assert settings_from_environment(environ) == {
        "RERANKER": "answers.rerankers.HttpReranker",
        "RERANK_URL": "http://10.0.0.7:8080/rerank",
        "RERANK_API": "tei",
        "RERANK_MODEL": "BAAI/bge-reranker-base",
        "RERANK_API_KEY": "k",
        "RERANK_TIMEOUT": 2.5,
        "RERANK_THREADS": 4,
        "REWRITE_FOLLOWUPS": True,
        "PROVIDER": "openai",
        "MODEL": "m",
        "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
    }
    assert ids(settings_from_environment(environ), settings) == []


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("Yes", True), ("0", False), ("off", False), ("FALSE", False)],
)
def test_a_switch_from_the_environment_reads_the_usual_spellings(raw, value):
    from answers.conf import settings_from_environment

    assert settings_from_environment({"ANSWERS_REWRITE_FOLLOWUPS": raw}) == {
        "REWRITE_FOLLOWUPS": value
    }


def test_a_switch_misspelt_in_the_environment_stops_start_up_naming_it():
    """``bool("0")`` is True: a switch is never converted by its type alone."""
    from django.core.exceptions import ImproperlyConfigured

    from answers.conf import settings_from_environment

    with pytest.raises(ImproperlyConfigured, match="ANSWERS_REWRITE_FOLLOWUPS must be on or off"):
        settings_from_environment({"ANSWERS_REWRITE_FOLLOWUPS": "ture"})


def test_rerank_threads_out_of_bounds_fails_the_check(settings):
    assert ids({"RERANK_THREADS": 0}, settings) == ["answers.E004"]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:11434/v1", "https://api.example.com/v1", "HTTP://gpu-box:8000/v1"]
)
def test_an_http_openai_base_url_passes(settings, url):
    assert ids({"PROVIDER": "openai", "MODEL": "m", "OPENAI_BASE_URL": url}, settings) == []


MANIFEST_STORAGE = "whitenoise.storage.CompressedManifestStaticFilesStorage"


def test_static_files_not_collected_are_a_deploy_error(settings, tmp_path):
    """With DEBUG off every page names its assets through collectstatic's manifest: without
    it each page was a 500 ("Missing staticfiles manifest entry") while check --deploy said
    "no issues"."""
    from answers.checks import check_static_files_collected

    settings.STATIC_ROOT = str(tmp_path)
    settings.STORAGES = {**settings.STORAGES, "staticfiles": {"BACKEND": MANIFEST_STORAGE}}
    (error,) = check_static_files_collected()
    assert error.id == "answers.E018"
    assert "collectstatic" in error.hint
    (tmp_path / "staticfiles.json").write_text('{"paths": {}, "version": "1.1"}')
    assert check_static_files_collected() == []


def test_static_files_served_from_the_finders_need_no_collecting(settings, tmp_path):
    from answers.checks import check_static_files_collected

    settings.STATIC_ROOT = str(tmp_path)
    assert check_static_files_collected() == []  # the tests' storage, as DEBUG's
