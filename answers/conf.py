"""App settings: one ``ANSWERS`` dict in the project's settings, read lazily.

Every key is optional. ``answers_settings.KEY`` returns the project's value or the default
below; the cache is dropped on ``setting_changed`` so ``override_settings`` works in tests.
``answers.checks`` validates the values at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connection
from django.dispatch import receiver


@dataclass(frozen=True)
class Setting:
    """One ``ANSWERS`` key, declared once: everything else (defaults, the environment
    variables config/settings.py reads, the bounds answers.checks enforces, docs/settings.md)
    is derived from these declarations."""

    name: str
    default: Any
    doc: str
    # Inclusive bounds of a number (None: unbounded above); checked with its type.
    low: float | None = None
    high: float | None = None
    # The environment variable config/settings.py takes this key from, if any.
    env: str = ""

    @property
    def kind(self) -> type:
        return type(self.default)

    def from_environment(self, raw: str) -> Any:
        """``raw`` (the variable's text) as this key's type; a value of the wrong kind stops
        start-up naming the variable. Bounds are the system check's job."""
        if self.default is None:  # a dotted path that may be unset
            return raw
        if self.kind is bool:  # bool("0") is True: never converted by its type alone
            switch = raw.strip().lower()
            if switch in _ON:
                return True
            if switch in _OFF:
                return False
            raise ImproperlyConfigured(
                f"{self.env} must be on or off (1/0, true/false), not {raw!r}."
            )
        try:
            return self.kind(raw)
        except ValueError:
            wanted = "an integer" if self.kind is int else "a number"
            raise ImproperlyConfigured(f"{self.env} must be {wanted}, not {raw!r}.") from None


_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "SEARCH_BACKEND",
        None,
        "Dotted path of the search backend; `None` picks the built-in one for the database "
        "in use (SQLite FTS5 or PostgreSQL full-text search).",
    ),
    Setting(
        "RERANKER",
        None,
        "Dotted path of a reranker class (`answers.rerankers.TermOverlapReranker`, "
        "`answers.rerankers.HttpReranker`), or `None` for no reranking.",
        env="ANSWERS_RERANKER",
    ),
    Setting(
        "RERANK_URL",
        "",
        "HttpReranker: the http(s) URL of the `/rerank` endpoint.",
        env="ANSWERS_RERANK_URL",
    ),
    Setting(
        "RERANK_API",
        "cohere",
        'HttpReranker: `"cohere"` (Cohere, Jina, vLLM, Infinity: `{model, query, documents, '
        'top_n}`) or `"tei"` (text-embeddings-inference: `{query, texts}`).',
        env="ANSWERS_RERANK_API",
    ),
    Setting(
        "RERANK_MODEL",
        "",
        "HttpReranker: the model name sent with each request.",
        env="ANSWERS_RERANK_MODEL",
    ),
    Setting(
        "RERANK_API_KEY",
        "",
        "HttpReranker: bearer key (empty: none).",
        env="ANSWERS_RERANK_API_KEY",
    ),
    Setting(
        "RERANK_TIMEOUT",
        5.0,
        "HttpReranker: seconds per request (its whole body included).",
        0.01,
        600,
        env="ANSWERS_RERANK_TIMEOUT",
    ),
    Setting(
        "RERANK_THREADS",
        16,
        "Threads of their own on which a process's reranks wait (never the database's); "
        "more reranks at once than threads queue for one. Read when the first rerank runs.",
        1,
        256,
        env="ANSWERS_RERANK_THREADS",
    ),
    Setting(
        "PROVIDER",
        "extractive",
        '`"extractive"` (offline, the default), `"openai"`, or a dotted path of a provider class.',
        env="ANSWERS_PROVIDER",
    ),
    Setting("MODEL", "", "Model name passed to / reported by the provider.", env="ANSWERS_MODEL"),
    Setting(
        "SCORE_THRESHOLD",
        0.22,
        "Normalized score (0..1, docs/scores.md) a chunk needs to become a source.",
        0.0,
        1.0,
    ),
    Setting(
        "SOURCE_SCORE_RATIO",
        0.4,
        "Once the best chunk reaches `SCORE_THRESHOLD`, the others stay candidates down to "
        "this share of its score when that is under the threshold (1.0: each chunk needs the "
        "threshold; ADR 0033).",
        0.0,
        1.0,
    ),
    Setting(
        "RANK_TITLE_WEIGHT",
        0.3,
        "Document ranking: added for the share of the question's words in a document's title "
        "(0: off; docs/scores.md).",
        0.0,
        10.0,
    ),
    Setting(
        "RANK_SIZE_PRIOR",
        0.03,
        "Document ranking: taken off per ln(chunks) of a document, so a broad survey does "
        "not outrank the specific page (0: off; docs/scores.md).",
        0.0,
        1.0,
    ),
    Setting(
        "RANK_API_TITLE_PENALTY",
        0.1,
        "Document ranking: taken off an API reference page (titled by one dotted name, "
        "`pandas.Series.str.join`) for a question that names no code (0: off; ADR 0032).",
        0.0,
        1.0,
    ),
    Setting(
        "REWRITE_FOLLOWUPS",
        False,
        "Before retrieval, have the provider rewrite a follow-up into a standalone question "
        "and search for that (providers that can: `openai`; docs/api.md#follow-ups).",
        env="ANSWERS_REWRITE_FOLLOWUPS",
    ),
    Setting(
        "REWRITE_TIMEOUT",
        3.0,
        "Seconds the follow-up rewrite may take; then the question is searched as it is.",
        0.1,
        60,
        env="ANSWERS_REWRITE_TIMEOUT",
    ),
    Setting("CANDIDATES", 40, "Chunks fetched from the search backend.", 1, 1000),
    Setting("MAX_CHUNKS_PER_DOCUMENT", 2, "Chunks of one document passed to the model.", 1, 50),
    Setting(
        "NEAR_DUPLICATE_SIMILARITY",
        0.8,
        "A source whose document's estimated similarity (MinHash of word 3-shingles) to a "
        "higher-ranked kept source's is at least this is dropped as a near-duplicate, after "
        "the access check (0: off; ADR 0032).",
        0.0,
        1.0,
        env="ANSWERS_NEAR_DUPLICATE_SIMILARITY",
    ),
    Setting("MAX_SOURCES", 6, "Distinct documents numbered as sources.", 1, 100),
    Setting(
        "MAX_QUESTION_LENGTH",
        2000,
        "Questions longer than this (characters) are refused (422).",
        1,
        100_000,
    ),
    Setting("HISTORY_TURNS", 3, "Earlier turns of a conversation included in the prompt.", 0, 50),
    Setting(
        "HISTORY_ANSWER_CHARS",
        1500,
        "Characters of each earlier answer kept in the prompt.",
        0,
        None,
    ),
    Setting(
        "NO_ANSWER_MESSAGE",
        "I couldn't find anything in the documents you can access that answers this question.",
        "The answer stored and shown when no source survives (a non-empty string).",
    ),
    Setting("CHUNK_SIZE", 1200, "Target chunk size in characters at ingest.", 100, 100_000),
    Setting(
        "INGEST_WORKER_MEMORY_MB",
        2048,
        "`manage.py ingest`: MB of address space a parsing worker may take beyond what it "
        "starts with; a file needing more fails alone (a PDF stream that inflates to "
        "gigabytes) instead of the OOM killer picking a process (0: no limit).",
        0,
        None,
        env="ANSWERS_INGEST_WORKER_MEMORY_MB",
    ),
    Setting("EXCERPT_CHARS", 500, "Characters of a source shown as its excerpt.", 20, None),
    Setting(
        "EXTRACTIVE_DELAY",
        0.0,
        "Seconds the extractive provider waits between deltas (0: as fast as it can).",
        0.0,
        10.0,
        env="ANSWERS_EXTRACTIVE_DELAY",
    ),
    Setting(
        "EXTRACTIVE_SENTENCES", 3, "Sentences the extractive provider puts in an answer.", 1, 20
    ),
    Setting(
        "OPENAI_BASE_URL",
        "",
        "OpenAI-compatible provider: the server's http(s) URL (empty: api.openai.com).",
        env="OPENAI_BASE_URL",
    ),
    Setting(
        "OPENAI_API_KEY",
        "",
        "OpenAI-compatible provider: the API key (may be empty for a server of your own).",
        env="OPENAI_API_KEY",
    ),
    Setting(
        "FIRST_TOKEN_TIMEOUT",
        30.0,
        "Seconds to wait for the first delta; then the answer fails, partial text kept.",
        0.01,
        3600,
    ),
    Setting(
        "IDLE_TIMEOUT",
        20.0,
        "Seconds to wait between deltas once text has started.",
        0.01,
        3600,
    ),
    Setting("TOTAL_TIMEOUT", 180.0, "Cap on a whole answer's generation, in seconds.", 0.01, 86400),
    Setting(
        "MAX_EMPTY_DELTAS",
        500,
        "Consecutive empty deltas before the stream is given up.",
        1,
        None,
    ),
    Setting("MAX_ANSWER_CHARS", 20000, "Cap on an answer's length in characters.", 1, None),
    Setting(
        "PROVIDER_RETRIES",
        2,
        "Retries of a 429, 5xx or connection failure before the first token (never sooner "
        "than its Retry-After; none when that is longer than FIRST_TOKEN_TIMEOUT).",
        0,
        10,
    ),
    Setting("RETRY_BACKOFF", 0.5, "Seconds before the first retry, doubling each time.", 0.0, 60),
    Setting(
        "MAX_CONCURRENT_STREAMS",
        2,
        "Answers one user may have generating at once (more: 429).",
        1,
        1000,
        env="ANSWERS_MAX_CONCURRENT_STREAMS",
    ),
    Setting(
        "QUESTIONS_PER_MINUTE",
        20,
        "Questions one user may ask a minute (more: 429 with `retry_after`).",
        1,
        100_000,
        env="ANSWERS_QUESTIONS_PER_MINUTE",
    ),
    Setting(
        "STREAM_COALESCE_MS",
        0,
        "Streamed tokens arriving within this many milliseconds go out as one frame "
        "(0: off; e.g. 5 for a fast local model).",
        0,
        1000,
        env="ANSWERS_STREAM_COALESCE_MS",
    ),
    Setting(
        "PREPARING_PAUSE_MS",
        0,
        "While questions wait to be prepared in a process, its answers already streaming "
        "pause up to this many milliseconds between events, so new questions reach their "
        "first token sooner, at a cost in throughput under large bursts (0: never; "
        "ADR 0036).",
        0,
        1000,
        env="ANSWERS_PREPARING_PAUSE_MS",
    ),
    Setting(
        "STREAM_CACHE",
        "default",
        "Cache alias holding each answer's stream log, so a reconnecting client replays "
        "what it missed; every process must share it (Redis when there are several).",
    ),
    Setting(
        "STREAM_LOG_TTL",
        600,
        "Seconds an answer's stream log is kept after its last event.",
        1,
        7 * 86400,
    ),
    Setting(
        "MAX_PROCESS_STREAMS",
        1000,
        "Answers one process generates or prepares at once; a question beyond them is "
        "refused before anything is stored (503 with Retry-After, or the socket's error "
        "'busy').",
        1,
        100_000,
        env="ANSWERS_MAX_PROCESS_STREAMS",
    ),
    Setting(
        "RETRIEVAL_THREADS",
        4,
        "Threads of their own (each with a database connection) that run retrieval on "
        "PostgreSQL, so concurrent questions search at once; 0: on the one thread that "
        "database work shares. SQLite always uses that thread.",
        0,
        64,
        env="ANSWERS_RETRIEVAL_THREADS",
    ),
    Setting(
        "SHUTDOWN_GRACE",
        20.0,
        "Seconds a process told to stop (SIGTERM) lets its running answers finish; it takes "
        "no new questions meanwhile, and stores those still running then as interrupted.",
        0.0,
        3600,
        env="ANSWERS_SHUTDOWN_GRACE",
    ),
    Setting(
        "STREAM_POLL_INTERVAL",
        2.0,
        "Seconds a follower waits for a live event before re-reading the log (recovers a "
        "dropped message or a generating process that died).",
        0.05,
        60,
    ),
)

DEFAULTS: dict[str, Any] = {setting.name: setting.default for setting in SETTINGS}


def settings_from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``ANSWERS`` keys that ``environ`` sets (empty variables set nothing)."""
    found: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = environ.get(setting.env, "") if setting.env else ""
        if not raw:
            continue
        found[setting.name] = setting.from_environment(raw)
    return found


def _markdown_cell(value: Any) -> str:
    return "`" + repr(value).replace("|", "\\|") + "`"


def settings_reference() -> str:
    """docs/settings.md, generated from SETTINGS (a test holds the file to it)."""
    lines = [
        "# `ANSWERS` settings",
        "",
        "<!-- Generated from answers/conf.py SETTINGS: "
        "python manage.py answers_settings > docs/settings.md -->",
        "",
        "Every key is optional, read lazily, re-read when settings change, and validated by a",
        "system check at start-up: `manage.py check` (and `migrate`) names a bad value's key,",
        "and daphne prints the same errors and exits instead of serving. Numbers must lie",
        "within the bounds shown. Keys with an environment variable can be set by it in the",
        "shipped project (`config/settings.py`); the value is converted to the key's type and",
        "checked like any other.",
        "",
        "| key | default | bounds | environment | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for setting in SETTINGS:
        if setting.low is None:
            bounds = ""
        elif setting.high is None:
            bounds = f"≥ {setting.low}"
        else:
            bounds = f"{setting.low} … {setting.high}"
        env = f"`{setting.env}`" if setting.env else ""
        doc = setting.doc.replace("|", "\\|")
        lines.append(
            f"| `{setting.name}` | {_markdown_cell(setting.default)} | {bounds} | {env} | {doc} |"
        )
    return "\n".join(lines) + "\n"


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


answers_settings = AnswersSettings()


@receiver(setting_changed)
def _reload_answers_settings(*, setting: str, **kwargs: Any) -> None:
    if setting == "ANSWERS":
        answers_settings.reload()
