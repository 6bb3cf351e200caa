"""App settings: one ``ANSWERS`` dict in the project's settings, read lazily.

Every key is optional. ``answers_settings.KEY`` returns the project's value or the default
below; the cache is dropped on ``setting_changed`` so ``override_settings`` works in tests.
``answers.checks`` validates the values at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver
from django.utils.module_loading import import_string

DEFAULTS: dict[str, Any] = {
    # Dotted path of the search backend; None picks one for the database in use (SQLite
    # FTS5 or PostgreSQL full-text search).
    "SEARCH_BACKEND": None,
    # Dotted path of a reranker, or None for no reranking.
    "RERANKER": None,
    # answers.rerankers.HttpReranker: the /rerank endpoint's URL, "cohere" (Cohere, Jina,
    # vLLM, Infinity: {model, query, documents, top_n}) or "tei" (text-embeddings-inference:
    # {query, texts}), model, bearer key and timeout in seconds.
    "RERANK_URL": "",
    "RERANK_API": "cohere",
    "RERANK_MODEL": "",
    "RERANK_API_KEY": "",
    "RERANK_TIMEOUT": 5.0,
    # "extractive" (offline, the default), or a dotted path to a provider class.
    "PROVIDER": "extractive",
    # Model name reported by / passed to the provider.
    "MODEL": "",
    # Normalized score (0..1, see README "Scores") a chunk needs to be a source.
    "SCORE_THRESHOLD": 0.25,
    # How many chunks the search backend returns before thresholding.
    "CANDIDATES": 40,
    # At most this many chunks of one document are passed to the model.
    "MAX_CHUNKS_PER_DOCUMENT": 2,
    # At most this many distinct documents are numbered as sources.
    "MAX_SOURCES": 6,
    # Questions longer than this (characters) are refused with a 400/422.
    "MAX_QUESTION_LENGTH": 2000,
    # Earlier turns of a conversation included in the prompt.
    "HISTORY_TURNS": 3,
    # Characters of each prior answer kept in the prompt.
    "HISTORY_ANSWER_CHARS": 1500,
    # Text stored and shown when no source survives.
    "NO_ANSWER_MESSAGE": (
        "I couldn't find anything in the documents you can access that answers this question."
    ),
    # Target size of a chunk in characters at ingest.
    "CHUNK_SIZE": 1200,
    # Characters of a source shown as its excerpt.
    "EXCERPT_CHARS": 500,
    # Seconds the extractive provider waits between deltas (0: as fast as it can).
    "EXTRACTIVE_DELAY": 0.0,
    # Sentences the extractive provider puts in an answer.
    "EXTRACTIVE_SENTENCES": 3,
    # OpenAI-compatible provider: server URL ("" = api.openai.com) and key; the
    # environment's OPENAI_BASE_URL / OPENAI_API_KEY are used when these are empty.
    "OPENAI_BASE_URL": "",
    "OPENAI_API_KEY": "",
    # Stream guards (seconds / counts): each ends the answer as failed, partial text kept.
    "FIRST_TOKEN_TIMEOUT": 30.0,
    "IDLE_TIMEOUT": 20.0,
    "TOTAL_TIMEOUT": 180.0,
    "MAX_EMPTY_DELTAS": 500,
    "MAX_ANSWER_CHARS": 20000,
    # Retries of retryable provider failures before the first token, with backoff.
    "PROVIDER_RETRIES": 2,
    "RETRY_BACKOFF": 0.5,
    # Abuse limits, per user: answers being generated at once, and questions a minute.
    "MAX_CONCURRENT_STREAMS": 2,
    "QUESTIONS_PER_MINUTE": 20,
    # Streamed tokens arriving within this many milliseconds go out as one frame (0: off).
    "STREAM_COALESCE_MS": 0,
    # Resumable streams (README "Streaming"): the cache alias that holds each answer's event
    # log, so a reconnecting client can replay what it missed (it must be shared by every
    # process: Redis when there are several), and seconds the log outlives its last event.
    "STREAM_CACHE": "default",
    "STREAM_LOG_TTL": 600,
    # Seconds a follower waits for a live event before re-reading the log (recovers a
    # message the channel layer dropped, or a generating process that died).
    "STREAM_POLL_INTERVAL": 2.0,
}

# Keys a project can take from the environment as ``ANSWERS_<KEY>`` (config/settings.py
# does, README "Configuration"): the value is converted to the type of the key's default,
# and answers.checks checks it like any other.
ENVIRONMENT_KEYS = (
    "PROVIDER",
    "MODEL",
    "EXTRACTIVE_DELAY",
    "STREAM_COALESCE_MS",
    "MAX_CONCURRENT_STREAMS",
    "QUESTIONS_PER_MINUTE",
)


def settings_from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``ANSWERS`` keys that ``environ`` sets (empty variables set nothing)."""
    found: dict[str, Any] = {}
    for key in ENVIRONMENT_KEYS:
        raw = environ.get(f"ANSWERS_{key}", "")
        if not raw:
            continue
        kind = type(DEFAULTS[key])
        try:
            found[key] = kind(raw)
        except ValueError:
            wanted = "an integer" if kind is int else "a number"
            raise ImproperlyConfigured(f"ANSWERS_{key} must be {wanted}, not {raw!r}.") from None
    return found


_SEARCH_BACKENDS = {
    "sqlite": "answers.search.sqlite_fts5.SQLiteFTS5Backend",
    "postgresql": "answers.search.postgres.PostgreSQLBackend",
}

_PROVIDER_ALIASES = {
    "extractive": "answers.providers.extractive.ExtractiveProvider",
    "openai": "answers.providers.openai.OpenAIProvider",
}


class AnswersSettings:
    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(settings, "ANSWERS", None) or {}
        return value if isinstance(value, dict) else {}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid ANSWERS setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()

    def provider_path(self) -> str:
        value = str(self.PROVIDER)
        return _PROVIDER_ALIASES.get(value, value)

    def search_backend_path(self) -> str:
        """``SEARCH_BACKEND``, or else the built-in backend for the database in use."""
        if self.SEARCH_BACKEND:
            return str(self.SEARCH_BACKEND)
        # The vendor comes from settings, without connecting. Another vendor gets the
        # SQLite backend, which the system check then reports as not fitting the database.
        return _SEARCH_BACKENDS.get(connection.vendor, _SEARCH_BACKENDS["sqlite"])

    def import_setting(self, path: str) -> Any:
        return import_string(path)


answers_settings = AnswersSettings()


@receiver(setting_changed)
def _reload_answers_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "ANSWERS":
        answers_settings.reload()
        from answers import registry

        registry.reset()
