"""Writes. Each is one short transaction with a fixed number of queries."""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.contrib.auth.models import Group, User
from django.db import IntegrityError, connection, transaction
from django.db.models import (
    F,
    Field,
    Max,
    Model,
    QuerySet,
)
from django.utils import timezone

from . import selectors
from .citations import FinalizedCitations, finalize_citations, strip_out_of_range_markers
from .conf import answers_settings
from .duplicates import body_signature
from .ingestion import ChunkSpan, chunk_text, content_hash
from .models import (
    Answer,
    ApiToken,
    Chunk,
    Citation,
    Conversation,
    Document,
    Feedback,
    Passage,
    Question,
    RetrievedSource,
)
from .providers.base import Usage
from .registry import get_search_backend
from .selectors import api_token_get_active
from .support import citations_support
from .types import Candidate, NumberedSource

T = TypeVar("T")

TOKEN_PREFIX = "ca_"  # noqa: S105 (a prefix, not a secret)
# Writing last_used_at on every request would make every read a write.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)
# Bounded retries of a write that lost a race to a concurrent writer (see each use).
TURN_ATTEMPTS = 3
INGEST_ATTEMPTS = 3


class AnswerStillStreaming(Exception):
    """Feedback on an answer that is still being generated: there is nothing to rate yet."""

    code = "streaming"

    def __init__(self, message: str, *, answer: Answer) -> None:
        super().__init__(message)
        self.answer = answer


def stream_abandoned_cutoff(*, now: datetime) -> datetime:
    """A ``streaming`` answer created before this is abandoned, not running: no generation
    outlives TOTAL_TIMEOUT, so its process died (the one rule, for limits and followers)."""
    return now - timedelta(seconds=float(answers_settings.TOTAL_TIMEOUT) + 60)


def answer_is_abandoned(*, answer: Answer, now: datetime) -> bool:
    return answer.status == Answer.Status.STREAMING and answer.created_at < (
        stream_abandoned_cutoff(now=now)
    )


class AnswerAlreadyFinal(Exception):
    """An answer's outcome is stored once; completing it again is a bug in the caller."""


class LimitExceeded(Exception):
    """A per-user abuse limit; the message is safe to show the user. ``retry_after``:
    whole seconds after which this limit surely lets the user's next question through."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _seconds_until(moment: datetime, *, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))


def _asker_lock(*, user: User) -> None:
    """Serialize this user's question claims until the enclosing transaction ends.

    Why an UPDATE (of a column to itself) and not SELECT ... FOR UPDATE: it is one statement
    that takes the lock the check-then-insert needs on both databases. On PostgreSQL it
    row-locks the user (other users' asks do not wait), so a second ask by the same user
    blocks here until the first commits, and then, under READ COMMITTED, counts the first's
    rows. On SQLite, where FOR UPDATE does not exist, a write is what takes the database's
    write lock (whatever the project's transaction_mode; ours is IMMEDIATE, which takes it at
    BEGIN already), and that lock is held to COMMIT, so claims run one after another.
    There, with IMMEDIATE or EXCLUSIVE transactions, the statement is left out: the
    transaction holds the write lock from its BEGIN on (a savepoint's from its outermost
    transaction's), which is all the UPDATE would take.
    """
    if connection.vendor == "sqlite" and getattr(connection, "transaction_mode", None) in {
        "IMMEDIATE",
        "EXCLUSIVE",
    }:
        return
    User.objects.filter(pk=user.pk).update(last_login=F("last_login"))


def _counts(**querysets: QuerySet[Any]) -> dict[str, int]:
    """Each queryset's row count, in one query (one round trip for both limits)."""
    parts: list[str] = []
    params: list[Any] = []
    for queryset in querysets.values():
        sql, part_params = queryset.order_by().values("pk").query.sql_with_params()
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS counted)")  # noqa: S608 (ORM's SQL)
        params.extend(part_params)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        row = cursor.fetchone()
    return {name: int(count) for name, count in zip(querysets, row, strict=True)}


class AskNotPermitted(Exception):
    """The user may not ask questions (``selectors.user_can_ask``)."""


def question_check_allowed(*, user: User) -> None:
    """May ``user`` ask now: the ask permission, then the per-user limits
    (``question_check_limits``), in one query where the permission can be read as rows
    (``selectors.user_ask_permission_rows``). Raises ``AskNotPermitted`` or
    ``LimitExceeded``; the limits, as there, are only an early refusal."""
    permission = selectors.user_ask_permission_rows(user=user)
    if permission is None and not selectors.user_can_ask(user=user):
        raise AskNotPermitted
    now = timezone.now()
    limited = _limited(user=user, now=now)
    extra = {} if permission is None else {"permission": permission}
    counts = _counts(**limited, **extra)
    if permission is not None and not counts["permission"]:
        raise AskNotPermitted
    _refuse_over_limits(limited=limited, counts=counts, now=now)


def question_check_limits(*, user: User) -> None:
    """Per-user limits, counted in the database so every process agrees.

    On its own this is only an early, cheap refusal: two asks can both pass it. The check
    that holds is the one ``question_create`` repeats under the asker's lock.
    """
    now = timezone.now()
    limited = _limited(user=user, now=now)
    _refuse_over_limits(limited=limited, counts=_counts(**limited), now=now)


def _limited(*, user: User, now: datetime) -> dict[str, QuerySet[Any]]:
    """What each per-user limit counts: the user's questions of the last minute, and their
    answers still streaming (not abandoned)."""
    cutoff = stream_abandoned_cutoff(now=now)
    return {
        "recent": Question.objects.filter(user=user, created_at__gte=now - timedelta(minutes=1)),
        "streaming": Answer.objects.filter(
            question__user=user, status=Answer.Status.STREAMING, created_at__gte=cutoff
        ),
    }


def _refuse_over_limits(
    *, limited: dict[str, QuerySet[Any]], counts: dict[str, int], now: datetime
) -> None:
    per_minute = int(answers_settings.QUESTIONS_PER_MINUTE)
    concurrent = int(answers_settings.MAX_CONCURRENT_STREAMS)
    if counts["recent"] >= per_minute:
        # A slot frees when the oldest question that fills the window leaves it.
        filling = limited["recent"].order_by("-created_at").values_list("created_at", flat=True)
        oldest = filling[per_minute - 1] if per_minute > 0 else now
        raise LimitExceeded(
            f"Too many questions: at most {per_minute} a minute. Try again soon.",
            retry_after=_seconds_until(oldest + timedelta(minutes=1), now=now),
        )
    if counts["streaming"] >= concurrent:
        # No answer outlives TOTAL_TIMEOUT (unless its process died): by then a slot is free.
        running = limited["streaming"].order_by("-created_at").values_list("created_at", flat=True)
        oldest = running[concurrent - 1] if concurrent > 0 else now
        total = timedelta(seconds=float(answers_settings.TOTAL_TIMEOUT))
        raise LimitExceeded(
            f"Too many answers at once: at most {concurrent}. Wait for one to finish.",
            retry_after=_seconds_until(oldest + total, now=now),
        )


@dataclass(frozen=True)
class CreatedQuestion:
    conversation: Conversation
    question: Question
    answer: Answer


def question_create(
    *,
    user: User,
    conversation: Conversation | None,
    text: str,
    candidates: Sequence[Candidate],
    provider: str,
    model: str,
    retrieval_ms: int,
    search_text: str = "",
    rewrite_ms: int | None = None,
    rewrite_error: str = "",
    rerank_error: str = "",
    context_ids: Sequence[int] = (),
) -> CreatedQuestion:
    """Store the question, its streaming answer and every candidate with its fate;
    ``context_ids``: the earlier turns its prompt holds as history (``Question.context``).

    The per-user limits are checked again here, in the same transaction and under the
    asker's lock, so checking and claiming a slot is one step: parallel asks cannot all
    pass the check before any of them is stored. Raises ``LimitExceeded``.
    """
    for attempt in range(TURN_ATTEMPTS):
        # From the argument again: a conversation a failed attempt created was rolled back.
        current = conversation
        turn = 1
        try:
            with transaction.atomic():
                # First the asker, then the conversation: every writer locks in this order.
                _asker_lock(user=user)
                question_check_limits(user=user)
                if current is None:
                    current = Conversation.objects.create(owner=user, last_at=timezone.now())
                else:
                    # Questions in one conversation take their turns one after another: the
                    # UPDATE of its last activity locks its row (NO KEY, as for any update of
                    # a column no key holds: rows that only reference it are not blocked)
                    # before the last turn is read, so two writers never compute the same one.
                    Conversation.objects.filter(pk=current.pk).update(last_at=timezone.now())
                    last = Question.objects.filter(conversation=current).aggregate(
                        last=Max("turn")
                    )["last"]
                    turn = (last or 0) + 1
                question = Question.objects.create(
                    conversation=current,
                    turn=turn,
                    text=text,
                    user=user,
                    search_text=search_text,
                    rewrite_ms=rewrite_ms,
                    rewrite_error=rewrite_error,
                    rerank_error=rerank_error,
                )
                answer = Answer.objects.create(
                    question=question,
                    provider=provider,
                    model=model,
                    retrieval_ms=retrieval_ms,
                )
                _retrieved_sources_insert(question_id=question.pk, candidates=candidates)
                if context_ids:
                    _question_context_insert(question_id=question.pk, context_ids=context_ids)
            return CreatedQuestion(conversation=current, question=question, answer=answer)
        except IntegrityError:
            # The atomic block has rolled back (to its savepoint inside an outer transaction),
            # so a retry starts clean. Retry only a lost turn race (where the lock does not
            # hold, e.g. a backend ignoring FOR UPDATE): then another writer's question holds
            # that turn now. Anything else (a deleted conversation, ...) is a real error.
            raced = (
                conversation is not None
                and Question.objects.filter(conversation=conversation, turn=turn).exists()
            )
            if not raced or attempt == TURN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _retrieved_sources_insert(*, question_id: int, candidates: Sequence[Candidate]) -> None:
    """Store every candidate of a question with its fate (``_rows_insert``: ``bulk_create``
    prepared each of the forty rows' fourteen values one call at a time, 1.5 ms an answer
    on the one thread database work shares, ADR 0035)."""
    _rows_insert(
        model=RetrievedSource,
        items=candidates,
        given={
            "question_id": lambda c: question_id,
            "document_id": lambda c: c.document_id,
            "chunk_id": lambda c: c.chunk_id,
            "rank": lambda c: c.rank,
            "score": lambda c: float(c.score),
            "rerank_score": lambda c: None if c.rerank_score is None else float(c.rerank_score),
            "prompt_number": lambda c: c.prompt_number,
            "dropped_reason": lambda c: c.dropped_reason,
        },
    )


def _question_context_insert(*, question_id: int, context_ids: Sequence[int]) -> None:
    """The turns in the question's history and, transitively, theirs: each answer given
    them may echo its own history (stored whole, so a read checks one level)."""
    through = Question.context.through
    earlier = through.objects.filter(from_question_id__in=context_ids)
    linked = set(context_ids) | set(earlier.values_list("to_question_id", flat=True))
    through.objects.bulk_create(
        through(from_question_id=question_id, to_question_id=pk) for pk in sorted(linked)
    )


def _chunks_insert(*, chunks: Sequence[tuple[int, ChunkSpan]]) -> None:
    """Store each ``(document id, span)`` as a chunk (``_rows_insert``: Django prepared each
    chunk's five values one call at a time, about half of an ingest writer's own CPU)."""
    _rows_insert(
        model=Chunk,
        items=chunks,
        given={
            "document_id": lambda c: c[0],
            "ordinal": lambda c: c[1].ordinal,
            "text": lambda c: c[1].text,
            "start": lambda c: c[1].start,
            "end": lambda c: c[1].end,
        },
    )


def _rows_insert(
    *, model: type[Model], items: Sequence[T], given: dict[str, Callable[[T], Any]]
) -> None:
    """A row of ``model`` per item, as ``bulk_create`` would insert them, written out: the
    values ``given`` (a column's attname to the item's value, already what the database
    stores) and every other column's default, without Django preparing each value of each
    row. SQLite gets ``bulk_create``'s statements and batches; PostgreSQL one statement
    of a column array each. Nothing is returned (no primary keys)."""
    if not items:
        return
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    defaults = {
        field.attname: field.get_db_prep_save(field.get_default(), connection)
        for field in fields
        if field.attname not in given
    }
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    table = quote(model._meta.db_table)
    if connection.vendor == "postgresql":
        # One array a column: the driver quotes a few arrays instead of every row's values
        # (1.9 ms of the shared thread's CPU for forty candidates, 0.7 ms this way; the
        # server parses a short statement too: 1.1 ms of its CPU down to 0.75).
        arrays = [
            [given[field.attname](item) for item in items]
            if field.attname in given
            else [defaults[field.attname]] * len(items)
            for field in fields
        ]
        casts = ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in fields)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT * FROM UNNEST({casts})",  # noqa: S608 (names quoted, values parameters)
                arrays,
            )
        return
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    size = connection.ops.bulk_batch_size(fields, list(items)) or len(items)
    with connection.cursor() as cursor:
        for start in range(0, len(items), size):
            batch = items[start : start + size]
            params = [
                given[field.attname](item) if field.attname in given else defaults[field.attname]
                for item in batch
                for field in fields
            ]
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(batch))}",  # noqa: S608 (names quoted, values parameters)
                params,
            )


@dataclass(frozen=True)
class CompletedAnswer:
    answer: Answer
    finalized: FinalizedCitations[NumberedSource]


def answer_complete(
    *,
    answer: Answer,
    raw_text: str,
    sources: Sequence[NumberedSource],
    status: str,
    error: str = "",
    first_token_ms: int | None,
    total_ms: int,
    usage: Usage | None = None,
) -> CompletedAnswer:
    """Finalize citations on ``raw_text`` (strip first, ADR 0011) and store the outcome."""
    stripped = strip_out_of_range_markers(raw_text, len(sources))
    finalized = finalize_citations(stripped, list(sources))
    final_numbers = {
        source.number: final for final, source in enumerate(finalized.sources, start=1)
    }
    cited = set() if finalized.fallback else set(final_numbers)
    # Each citation's support by the passage it cites (the final numbers, ADR 0023).
    support = (
        []
        if finalized.fallback
        else citations_support(
            finalized.text,
            {
                final: [c.text for c in source.candidates]
                for final, source in enumerate(finalized.sources, start=1)
            },
        )
    )
    scores = [citation.support for citation in support]
    now = timezone.now()
    with transaction.atomic():
        # Only a streaming answer is finalized, once: a second completion changes nothing.
        finalized_now = Answer.objects.filter(pk=answer.pk, status=Answer.Status.STREAMING).update(
            raw_text=raw_text,
            final_text=finalized.text,
            status=status,
            error=error,
            citations_fallback=finalized.fallback and bool(sources),
            first_token_ms=first_token_ms,
            total_ms=total_ms,
            completed_at=now,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            support_min=min(scores) if scores else None,
            support_mean=round(sum(scores) / len(scores), 4) if scores else None,
        )
        if not finalized_now:
            raise AnswerAlreadyFinal(f"answer {answer.pk} was already finalized")
        Citation.objects.bulk_create(Citation(answer_id=answer.pk, **asdict(c)) for c in support)
        if sources:
            # One UPDATE of the prompt's sources whatever their number: their fate in the
            # final list and the snapshot of what the answer was written from.
            _prompt_sources_update(
                question_id=answer.question_id,
                sources=sources,
                final_numbers=final_numbers,
                cited=cited,
            )
    answer.raw_text, answer.final_text, answer.status, answer.error = (
        raw_text,
        finalized.text,
        status,
        error,
    )
    answer.citations_fallback = finalized.fallback and bool(sources)
    answer.first_token_ms, answer.total_ms, answer.completed_at = first_token_ms, total_ms, now
    return CompletedAnswer(answer=answer, finalized=finalized)


def _prompt_sources_update(
    *,
    question_id: int,
    sources: Sequence[NumberedSource],
    final_numbers: dict[int, int],
    cited: set[int],
) -> None:
    """Write each prompt source's fate (``final_number``, ``cited``) and keep what the
    answer was written from as it was (ADR 0022): each prompt passage's text (stored once
    per distinct text), its document's title, its position, and whether everyone could view
    the document (as retrieval read it). Two statements whatever the number of sources.

    The UPDATE is written out as SQL: as ORM ``Case``/``When`` expressions (one ``When``
    per passage and column, some fifty for six sources) Django spent milliseconds of the
    one thread database work shares resolving and copying them for every answer (ADR 0035).
    Each row finds its passage in the same statement, by the digest index."""
    members = [candidate for source in sources for candidate in source.candidates]
    digests = {candidate.rank: content_hash(candidate.text) for candidate in members}
    texts = {digests[candidate.rank]: candidate.text for candidate in members}
    Passage.objects.bulk_create(
        [Passage(digest=digest, text=text) for digest, text in texts.items()],
        ignore_conflicts=True,  # already kept for an earlier answer
    )
    quote = connection.ops.quote_name
    table = quote(RetrievedSource._meta.db_table)

    def column(name: str, model: type[Model] = RetrievedSource) -> str:
        field = model._meta.get_field(name)
        assert isinstance(field, Field) and field.column is not None
        return quote(field.column)

    params: list[Any] = []

    def case(key: str, pairs: Sequence[tuple[Any, Any]], default: Any = None) -> str:
        """``CASE key WHEN k THEN v ... [ELSE default] END``; no ELSE without a default
        (NULL, as a ``Case`` without one)."""
        for pair in pairs:
            params.extend(pair)
        whens = " WHEN %s THEN %s" * len(pairs)
        if default is not None:
            params.append(default)
            if not pairs:
                return "%s"
            return f"CASE {key}{whens} ELSE %s END"
        return f"CASE {key}{whens} END" if pairs else "NULL"

    rank = f"{table}.{column('rank')}"
    prompt_number = column("prompt_number")
    passage_of = (
        f"SELECT {column('id', Passage)} FROM {quote(Passage._meta.db_table)} "  # noqa: S608 (names quoted)
        f"WHERE {column('digest', Passage)} = "
    )
    # Public as retrieval read it and still now, when the answer is written: a document
    # restricted meanwhile, or deleted (its access at deletion unknown here, so never
    # widened, ``document_snapshots_close``), is not.
    documents = quote(Document._meta.db_table)

    def public_then() -> str:
        public = case(rank, [(c.rank, c.document_public) for c in members], False)
        params.append(Document.Access.EVERYONE)
        return (
            f"({public} AND EXISTS (SELECT 1 FROM {documents} WHERE "  # noqa: S608 (names quoted)
            f"{documents}.{column('id', Document)} = {table}.{column('document')} "
            f"AND {documents}.{column('access', Document)} = %s))"
        )

    # In the statement's order: each ``case`` adds its parameters as it is written.
    assignments = [
        (column("final_number"), case(prompt_number, list(final_numbers.items()))),
        (column("cited"), case(prompt_number, [(p, True) for p in sorted(cited)], False)),
        (
            column("passage"),
            f"({passage_of}{case(rank, [(c.rank, digests[c.rank]) for c in members])})",
        ),
        (column("document_title"), case(rank, [(c.rank, c.title) for c in members])),
        (column("chunk_ordinal"), case(rank, [(c.rank, c.ordinal) for c in members])),
        (column("document_public"), public_then()),
    ]
    sql = (
        f"UPDATE {table} SET {', '.join(f'{name} = {value}' for name, value in assignments)} "  # noqa: S608 (names quoted, values parameters)
        f"WHERE {column('question')} = %s AND {prompt_number} IS NOT NULL"
    )
    params.append(question_id)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def answer_mark_reviewed(*, answer: Answer, reviewer: User, reviewed: bool, note: str) -> Answer:
    answer.reviewed = reviewed
    answer.review_note = note
    answer.reviewed_by = reviewer if reviewed else None
    answer.reviewed_at = timezone.now() if reviewed else None
    answer.save(update_fields=["reviewed", "review_note", "reviewed_by", "reviewed_at"])
    return answer


def feedback_record(
    *, answer: Answer, user: User, rating: str, comment: str | None = None
) -> Feedback:
    """One feedback per user and answer; giving it again replaces the rating. The comment
    is replaced only when one is given (``""`` clears it): changing a rating with a click
    must not erase what was written earlier."""
    if rating not in Feedback.Rating.values:
        raise ValueError(f"rating must be one of {', '.join(Feedback.Rating.values)}")
    if answer.status == Answer.Status.STREAMING:
        raise AnswerStillStreaming("The answer is still being generated.", answer=answer)
    defaults = {"rating": rating} if comment is None else {"rating": rating, "comment": comment}
    # Safe against two concurrent first feedbacks: update_or_create runs in a transaction,
    # and when its INSERT loses to the other one's on the unique (answer, user) it rolls
    # back to a savepoint and locks and updates the committed row instead (a test checks).
    feedback, _ = Feedback.objects.update_or_create(answer=answer, user=user, defaults=defaults)
    return feedback


def _hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class TokenNotPermitted(Exception):
    """A token would let its creator act as another user."""


def api_token_check_creator(*, creator: User, user: User) -> None:
    """A token acts with all of its user's permissions, so only a superuser may create one
    for someone else; any other staff member only for themselves. Raises
    ``TokenNotPermitted``."""
    if not (creator.is_superuser or creator.pk == user.pk):
        raise TokenNotPermitted("Only a superuser may create a token for another user.")


def api_token_create(
    *, user: User, name: str, created_by: User | None = None
) -> tuple[ApiToken, str]:
    """A new token; the raw value is returned once and only its hash is stored.
    ``created_by``: the staff member asking (``api_token_check_creator``); None for the
    operator's ``manage.py createapitoken``."""
    if created_by is not None:
        api_token_check_creator(creator=created_by, user=user)
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, token_hash=_hash_token(raw), prefix=raw[: len(TOKEN_PREFIX) + 6]
    )
    return token, raw


def api_token_authenticate(*, raw: str) -> ApiToken | None:
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = api_token_get_active(token_hash=_hash_token(raw))
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOKEN_TOUCH_INTERVAL:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_rename(*, token: ApiToken, name: str) -> ApiToken:
    token.name = name
    token.save(update_fields=["name"])
    return token


def api_tokens_revoke(*, tokens: Iterable[ApiToken]) -> tuple[int, int]:
    """Revoke each of ``tokens``: how many were revoked now, and how many already were
    (those keep the time they were revoked)."""
    revoked = already = 0
    for token in tokens:
        if token.revoked_at is not None:
            already += 1
            continue
        api_token_revoke(token=token)
        revoked += 1
    return revoked, already


@dataclass(frozen=True)
class IngestResult:
    document: Document
    outcome: str  # "created", "updated" or "unchanged"
    chunks: int


@dataclass(frozen=True)
class DocumentSource:
    """One document to ingest, as ``document_ingest`` takes it; ``spans`` if already cut
    (by ``chunk_text`` with the same size, e.g. in an ingest worker)."""

    source_key: str
    title: str
    body: str
    url: str = ""
    spans: Sequence[ChunkSpan] | None = None
    # body_signature(body) if already computed (an ingest worker does).
    near_signature: bytes | None = None


# A batch's transaction: large enough that commits stop mattering, small enough that a
# conflict's per-document retry and the writer's lock stay short.
INGEST_BATCH_DOCUMENTS = 200
INGEST_BATCH_CHUNKS = 2_000


def _document_derived(*, body: str, near_signature: bytes | None = None) -> dict[str, Any]:
    """The fields computed from a new or changed document's body, for the one and the
    batch path alike (an unchanged one is recognised by its content hash alone);
    ``near_signature`` if already computed from this body."""
    if near_signature is None:
        near_signature = body_signature(body)
    return {"content_hash": content_hash(body), "near_signature": near_signature}


def _document_is_unchanged(*, document: Document, title: str, digest: str) -> bool:
    return document.content_hash == digest and document.title == title


def _document_assign(
    *, document: Document, title: str, body: str, url: str, derived: dict[str, Any]
) -> None:
    document.title, document.body, document.url = title, body, url or document.url
    for name, value in derived.items():
        setattr(document, name, value)


def document_ingest(
    *,
    source_key: str,
    title: str,
    body: str,
    url: str = "",
    group: Group | None = None,
    chunk_size: int,
    spans: Sequence[ChunkSpan] | None = None,
) -> IngestResult:
    """Create or update a document; unchanged bodies are skipped, changed ones re-chunked.

    Safe when several processes ingest the same ``source_key`` at once: the row lock
    serializes writers of an existing document, the unique ``source_key`` lets only one
    create it, and the others retry and find it (see below).
    """
    digest = content_hash(body)
    for attempt in range(INGEST_ATTEMPTS):
        creating = False
        try:
            with transaction.atomic():
                document = (
                    Document.objects.select_for_update().filter(source_key=source_key).first()
                )
                outcome = "updated"
                if document is None:
                    document = Document(source_key=source_key)
                    outcome, creating = "created", True
                elif _document_is_unchanged(document=document, title=title, digest=digest):
                    _document_apply_access(document=document, group=group)
                    return IngestResult(document, "unchanged", document.chunk_count or 0)
                _document_assign(document=document, title=title, body=body, url=url,
                                 derived=_document_derived(body=body))  # fmt: skip
                if spans is None:
                    spans = chunk_text(body, size=chunk_size)
                document.chunk_count = len(spans)
                document.save()
                _document_replace_chunks(document=document, spans=spans)
                _document_apply_access(document=document, group=group)
            return IngestResult(document, outcome, len(spans))
        except IntegrityError:
            # Two writers that both found no row both INSERT; on PostgreSQL the later one
            # waits on the unique index until the first commits, then fails here. Its
            # transaction is rolled back, so a fresh attempt finds the committed row, locks
            # it and ends "unchanged" or "updated". Only that race is retried: an error
            # while updating, or with no such row now, is a real one.
            raced = creating and Document.objects.filter(source_key=source_key).exists()
            if not raced or attempt == INGEST_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def documents_ingest_batch(
    *, sources: Sequence[DocumentSource], group: Group | None = None, chunk_size: int
) -> list[IngestResult]:
    """``document_ingest`` for each source (results in the same order), in one transaction
    with a fixed number of queries for the new and unchanged documents.

    Keep a batch within INGEST_BATCH_DOCUMENTS and INGEST_BATCH_CHUNKS. If another writer
    created one of these documents meanwhile (the unique ``source_key``), the batch is
    rolled back and each document goes through ``document_ingest``, which handles that race.
    """

    def one_by_one() -> list[IngestResult]:
        return [
            document_ingest(source_key=s.source_key, title=s.title, body=s.body, url=s.url,
                            group=group, chunk_size=chunk_size, spans=s.spans)
            for s in sources
        ]  # fmt: skip

    keys = [source.source_key for source in sources]
    if len(set(keys)) != len(keys):  # the same document twice: only in order, one by one
        return one_by_one()
    try:
        with transaction.atomic():
            return _documents_write(sources=sources, group=group, chunk_size=chunk_size)
    except IntegrityError:
        return one_by_one()


def _documents_write(
    *, sources: Sequence[DocumentSource], group: Group | None, chunk_size: int
) -> list[IngestResult]:
    found = Document.objects.select_for_update().defer("body")
    existing = {
        d.source_key: d for d in found.filter(source_key__in=[s.source_key for s in sources])
    }
    planned: list[tuple[Document, str, list[ChunkSpan] | Sequence[ChunkSpan]]] = []
    created: list[Document] = []
    replaced: list[Document] = []
    for source in sources:
        document = existing.get(source.source_key)
        if document is not None and _document_is_unchanged(
            document=document, title=source.title, digest=content_hash(source.body)
        ):
            planned.append((document, "unchanged", []))
            continue
        spans = source.spans
        if spans is None:
            spans = chunk_text(source.body, size=chunk_size)
        if document is None:
            document = Document(source_key=source.source_key)
            if group is not None:
                document.access = Document.Access.GROUPS
            created.append(document)
            outcome = "created"
        else:
            replaced.append(document)
            outcome = "updated"
        derived = _document_derived(body=source.body, near_signature=source.near_signature)
        _document_assign(document=document, title=source.title, body=source.body,
                         url=source.url, derived=derived)  # fmt: skip
        document.chunk_count = len(spans)
        planned.append((document, outcome, spans))
    # Updates are rare (a re-ingest of changed files): saved one by one, as document_ingest.
    for document in replaced:
        document.save()
    if replaced:
        Chunk.objects.filter(document__in=replaced).delete()
    # Both backends return the new primary keys from a bulk INSERT (SQLite from 3.35).
    Document.objects.bulk_create(created)
    _chunks_insert(
        chunks=[
            (document.pk, span)
            for document, outcome, spans in planned
            if outcome != "unchanged"
            for span in spans
        ]
    )
    if group is not None:
        _documents_apply_access(documents=[document for document, _, _ in planned], group=group)
    return [
        IngestResult(document, outcome, document.chunk_count or 0)
        for document, outcome, _ in planned
    ]


def search_index_maintain() -> None:
    """After a bulk ingest: let the search backend tidy its index (``maintain()``, optional
    for third-party backends), so the first questions do not pay for the load."""
    maintain = getattr(get_search_backend(), "maintain", None)
    if callable(maintain):
        maintain()


class DocumentAccessInvalid(Exception):
    """Groups chosen for a document open to everyone: they would restrict nothing."""


def document_check_access(*, access: str, groups: Iterable[Group]) -> None:
    """Groups restrict a document only with ``Access.GROUPS``; chosen while it is open to
    everyone they are ignored, and whoever chose them believes it restricted. Raises
    ``DocumentAccessInvalid``. (Groups access with no group is allowed: nobody but a
    reviewer of everything sees it, a way to hold a document back.)"""
    if access == Document.Access.EVERYONE and any(True for _ in groups):
        raise DocumentAccessInvalid(
            "Groups restrict nothing while the document is open to everyone: choose "
            "“Members of the chosen groups”, or clear the groups."
        )


def document_save(
    *, document: Document, chunk_size: int, groups: Iterable[Group] | None = None
) -> Document:
    """Save an edited document, re-chunking when its body changed; ``groups``: who may
    view it, set with its access in the same transaction (``document_check_access``)."""
    if groups is not None:
        groups = list(groups)
        document_check_access(access=document.access, groups=groups)
    digest = content_hash(document.body)
    changed = document.pk is None or digest != document.content_hash
    document.content_hash = digest
    spans: Sequence[ChunkSpan] = ()
    if changed:
        document.near_signature = body_signature(document.body)
        spans = chunk_text(document.body, size=chunk_size)
        document.chunk_count = len(spans)
    with transaction.atomic():
        document.save()
        if changed:
            _document_replace_chunks(document=document, spans=spans)
        if groups is not None:
            document.groups.set(groups)
    return document


def document_snapshots_close(*, document: Document) -> None:
    """Before ``document`` is deleted: if it is restricted now, no answer may show its
    snapshot once it is gone. A deleted document's passages stay readable only where
    everyone could view it (ADR 0022); one restricted since its answers were written must
    not come back through them by being deleted, so they forget it was ever open."""
    if document.access != Document.Access.EVERYONE:
        RetrievedSource.objects.filter(document_id=document.pk, document_public=True).update(
            document_public=False
        )


def _document_replace_chunks(*, document: Document, spans: Sequence[ChunkSpan]) -> None:
    # The caller has saved document.chunk_count = len(spans) with the document.
    Chunk.objects.filter(document=document).delete()
    _chunks_insert(chunks=[(document.pk, span) for span in spans])


def _documents_apply_access(*, documents: Sequence[Document], group: Group) -> None:
    """``_document_apply_access`` for many documents, in three queries."""
    ids = [document.pk for document in documents]
    Document.objects.filter(pk__in=ids).exclude(access=Document.Access.GROUPS).update(
        access=Document.Access.GROUPS
    )
    through = Document.groups.through
    through.objects.bulk_create(
        [through(document_id=pk, group_id=group.pk) for pk in ids], ignore_conflicts=True
    )
    for document in documents:
        document.access = Document.Access.GROUPS


def _document_apply_access(*, document: Document, group: Group | None) -> None:
    if group is None:
        return
    if document.access != Document.Access.GROUPS:
        document.access = Document.Access.GROUPS
        document.save(update_fields=["access"])
    document.groups.add(group)
