"""Reads. Every read that returns something to a user checks that user's access here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_backends,
    get_user_model,
    load_backend,
)
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, Permission, PermissionsMixin, User
from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils.crypto import constant_time_compare

from .conf import answers_settings
from .gaps import GapQuestion
from .models import (
    Answer,
    ApiToken,
    Chunk,
    Conversation,
    Document,
    Feedback,
    Question,
    RetrievedSource,
)
from .prompt import PriorTurn
from .support import SUPPORTED
from .types import Candidate

if TYPE_CHECKING:
    from .models import Citation

AnyUser = User | AnonymousUser


class NotFound(Exception):
    """The object does not exist, or is not the caller's to see (the two look the same)."""

    code = "not_found"


# The largest primary key a big integer column holds: larger ids are refused, not looked up.
MAX_ID = 2**63 - 1


ASK_PERMISSION = "answers.ask_question"


def user_can_ask(*, user: AnyUser) -> bool:
    """Whether ``user`` holds the ask permission: one query where it can be read as rows
    (``user_ask_permission_rows``), else Django's ``has_perm`` (ModelBackend reads the
    user's permissions and their groups' in two queries, cached on the user object)."""
    rows = user_ask_permission_rows(user=user)
    if rows is not None:
        return rows.exists()
    return bool(user.is_authenticated and user.is_active and user.has_perm(ASK_PERMISSION))


# The methods through which an auth backend grants permissions (ModelBackend's own helpers
# included): a backend that overrides none of them grants exactly ModelBackend's rows.
_PERMISSION_METHODS = (
    "has_perm",
    "get_all_permissions",
    "get_user_permissions",
    "get_group_permissions",
    "_get_permissions",
    "_get_user_permissions",
    "_get_group_permissions",
)


def _permissions_are_model_rows() -> bool:
    """Whether ``has_perm`` of an active user who is no superuser is exactly "the user or
    one of their groups holds the permission row": some configured backend is a
    ModelBackend, none changes how it grants, and the others grant nothing (no
    ``has_perm``, as axes' standalone backend)."""
    backends = get_backends()
    for backend in backends:
        if isinstance(backend, ModelBackend):
            if any(
                getattr(type(backend), name) is not getattr(ModelBackend, name)
                for name in _PERMISSION_METHODS
            ):
                return False
        elif hasattr(backend, "has_perm"):
            return False
    return any(isinstance(backend, ModelBackend) for backend in backends)


def user_ask_permission_rows(*, user: AnyUser) -> QuerySet[Permission] | None:
    """Rows that exist if and only if ``user_can_ask(user=user)``, for a caller to test in a
    query it runs anyway: Django's ModelBackend reads a user's permissions and their
    groups' in two queries of their own (once per user object, and each ask loads the user
    afresh). None when no query is needed (inactive, superuser, permissions already read)
    or the configured auth backends decide otherwise: then ask ``user_can_ask``."""
    if (
        not user.is_authenticated
        or not user.is_active
        or getattr(user, "is_superuser", False)
        or hasattr(user, "_perm_cache")
        # A user model with a has_perm of its own decides for itself. ``__class__``, not
        # type(): a request's and a socket's user is a lazy proxy, which reports the
        # class of the user it wraps (its own type's has_perm is a proxy method).
        or getattr(user.__class__, "has_perm", None) is not PermissionsMixin.has_perm
        or not _permissions_are_model_rows()
    ):
        return None
    app_label, codename = ASK_PERMISSION.split(".")
    return Permission.objects.filter(
        Q(user=user) | Q(group__user=user),
        content_type__app_label=app_label,
        codename=codename,
    )


def _readers_only(queryset: QuerySet[Any], *, user: AnyUser) -> QuerySet[Any]:
    """``queryset`` for a user who may ask, empty for one who may not: the app's pages, API
    and socket are for those who may ask (docs/access.md), and someone whose permission was
    revoked reads nothing more, their own old answers included. The permission is a
    condition of the same query where it can be read as rows
    (``user_ask_permission_rows``), so no read costs a query more; otherwise it is
    ``user_can_ask``. Either way the reader gets what a missing object gives (``NotFound``,
    an empty list): nothing depends on what exists."""
    rows = user_ask_permission_rows(user=user)
    if rows is not None:
        return queryset.filter(Exists(rows))
    return queryset if user_can_ask(user=user) else queryset.none()


def document_visible_q(*, user: AnyUser) -> Q:
    """Documents ``user`` may view: open to everyone who may ask, or shared with a group."""
    if getattr(user, "is_superuser", False) and user.is_active:
        return Q()
    if not user.is_authenticated or not user.is_active:
        return Q(pk__in=[])
    # A subquery rather than a join: no DISTINCT needed, and the database can answer it
    # from the index on ``access`` alone (every scoped search reads it, ADR 0009).
    shared = Document.groups.through.objects.filter(group__in=user.groups.all())
    return Q(access=Document.Access.EVERYONE) | Q(
        access=Document.Access.GROUPS,
        pk__in=shared.values("document_id"),
    )


def document_list_visible(*, user: AnyUser) -> QuerySet[Document]:
    # No DISTINCT: the rule joins nothing (its group test is a subquery), so no document
    # repeats, and as a subquery of the scoped search a DISTINCT made the database sort
    # every visible document's id on every question.
    return Document.objects.filter(document_visible_q(user=user))


def document_list_hidden(*, user: AnyUser) -> QuerySet[Document]:
    """The documents ``user`` may not view: exactly those ``document_list_visible`` leaves
    out (tests hold the two to a partition of the table for every kind of user)."""
    rule = document_visible_q(user=user)
    # An empty rule (a superuser's) matches every document; excluding it would too.
    return Document.objects.exclude(rule) if rule else Document.objects.none()


def document_visible_ids(
    *, user: AnyUser, document_ids: Iterable[int], read: Mapping[int, bool] | None = None
) -> set[int]:
    """Which of ``document_ids`` ``user`` may view. ``read``: their visibility to ``user``
    as a query of this same request read it with their content (``candidates_for_hits``
    with ``viewer``); when it covers every id, it is the answer and nothing is read again."""
    ids = list(document_ids)
    if read is not None and all(pk in read for pk in ids):
        return {pk for pk in ids if read[pk]}
    if not ids:
        return set()
    return set(document_list_visible(user=user).filter(pk__in=ids).values_list("pk", flat=True))


def user_may_review_all(*, user: AnyUser) -> bool:
    """A reviewer who may read every answer and document in the admin, whatever its
    access (superusers implicitly)."""
    return bool(user.is_active and user.has_perm("answers.review_all_answers"))


def document_admin_queryset(*, reviewer: AnyUser) -> QuerySet[Document]:
    """The documents ``reviewer`` may list, search and open in the admin."""
    documents = Document.objects.all()
    if user_may_review_all(user=reviewer):
        return documents
    return documents.filter(pk__in=document_list_visible(user=reviewer).values("pk"))


def document_get_visible(*, user: AnyUser, document_id: int) -> Document:
    """The document, for its page: not its body or signature (its page shows its chunks,
    the same text; a body can be megabytes)."""
    documents = _readers_only(document_list_visible(user=user), user=user)
    document = documents.defer("body", "near_signature").filter(pk=document_id).first()
    if document is None:
        raise NotFound
    return document


def candidates_for_hits(
    *, hits: Iterable[tuple[int, float]], viewer: AnyUser | None = None
) -> list[Candidate]:
    """Candidates for ``(chunk_id, score)`` hits, best first; one query. With ``viewer``,
    each one's ``document_visible`` to them is read in the same query (the access rule of
    ``document_list_visible``, for ``document_visible_ids(read=...)``)."""
    hit_list = list(hits)
    # Each candidate document's size in chunks (answers.ranking) is stored with it
    # (migration 0016), not counted here. Plain rows, not model instances: forty chunks
    # and their documents built as models (deferred fields and all) cost more than the
    # query on the shared database thread.
    chunks = Chunk.objects.all()
    if viewer is not None:
        visible = document_list_visible(user=viewer).filter(pk=OuterRef("document_id"))
        chunks = chunks.annotate(document_visible=Exists(visible))
    else:
        chunks = chunks.annotate(document_visible=Value(None, output_field=BooleanField()))
    rows = (
        chunks.filter(pk__in=[c for c, _ in hit_list])
        .order_by()
        .values_list(
            "pk",
            "document_id",
            "ordinal",
            "text",
            "document__title",
            "document__url",
            "document__access",
            "document__near_signature",
            "document__chunk_count",
            "document_visible",
        )
    )
    by_id = {row[0]: row for row in rows}
    candidates: list[Candidate] = []
    everyone = Document.Access.EVERYONE
    for chunk_id, score in hit_list:
        row = by_id.get(chunk_id)
        if row is None:  # deleted between search and fetch
            continue
        _, document_id, ordinal, text, title, url, access, signature, size, readable = row
        candidates.append(
            Candidate(
                chunk_id=chunk_id,
                document_id=document_id,
                ordinal=ordinal,
                title=title,
                url=url,
                text=text,
                rank=len(candidates) + 1,
                score=score,
                document_chunks=size or 1,
                document_public=access == everyone,
                # PostgreSQL returns bytea as a memoryview.
                document_signature=bytes(signature or b""),
                document_visible=readable,
            )
        )
    return candidates


def conversation_get_for_user(*, conversation_id: uuid.UUID, user: AnyUser) -> Conversation:
    conversations = Conversation.objects.filter(pk=conversation_id, owner_id=user.pk)
    conversation = _readers_only(conversations, user=user).first()
    if conversation is None:
        raise NotFound
    return conversation


def conversation_history(
    *, conversation: Conversation, user: AnyUser
) -> tuple[list[PriorTurn], list[int]]:
    """The last ``HISTORY_TURNS`` turns ``user`` may still read, oldest first, and their
    questions' ids (the new question's ``context``): a turn whose answer is withheld from
    them (``answer_withheld_q``) is left out whole."""
    limit = int(answers_settings.HISTORY_TURNS)
    chars = int(answers_settings.HISTORY_ANSWER_CHARS)
    questions = (
        Question.objects.filter(conversation=conversation)
        .exclude(Exists(_hidden_prompt_sources(user=user, question_id=OuterRef("pk"))))
        .select_related("answer")
        .order_by("-turn")[: max(limit, 1)]
    )
    turns, ids = [], []
    for question in questions:
        answer = getattr(question, "answer", None)
        text = (answer.final_text or answer.raw_text) if answer else ""
        turns.append(PriorTurn(question=question.text, answer=text[:chars]))
        ids.append(question.pk)
    if not limit:
        return [], []
    return list(reversed(turns))[-limit:], list(reversed(ids))[-limit:]


def _answers_base() -> QuerySet[Answer]:
    return Answer.objects.select_related("question", "question__conversation")


def answer_get_for_user(*, answer_id: int, user: AnyUser) -> Answer:
    answers = _answers_base().filter(pk=answer_id, question__user_id=user.pk or 0)
    answer = _readers_only(answers, user=user).first()
    if answer is None:
        raise NotFound
    return answer


def conversation_list_for_user(*, user: AnyUser) -> QuerySet[Conversation]:
    """``user``'s conversations with at least one question, latest activity first
    (``last_at``), each with ``first_question``, ``last_question`` (their own words) and
    ``question_count``. A page is read from the (owner, last_at) index, and only its
    conversations' questions are counted: the history once aggregated every question of
    the user for each page (90 ms at 100,000 questions on SQLite)."""
    questions = Question.objects.filter(conversation=OuterRef("pk")).order_by()
    counted = questions.values("conversation").annotate(n=Count("pk")).values("n")
    return (
        _readers_only(
            Conversation.objects.filter(owner_id=user.pk or 0, last_at__isnull=False), user=user
        )
        .annotate(
            question_count=Subquery(counted),
            first_question=Subquery(questions.order_by("turn").values("text")[:1]),
            last_question=Subquery(questions.order_by("-turn").values("text")[:1]),
        )
        .order_by("-last_at", "-pk")
    )


def conversation_answers_for_user(*, conversation: Conversation) -> QuerySet[Answer]:
    """The answers of a conversation already read through ``conversation_get_for_user``,
    oldest turn first (each one's own access is checked where it is presented)."""
    return _answers_base().filter(question__conversation=conversation).order_by("question__turn")


def answer_list_for_user(*, user: AnyUser) -> QuerySet[Answer]:
    """``user``'s answers, newest first. Ordered by their questions' time (an answer is
    made with its question, in one transaction): a page is then read from the question
    index on (user, created_at) instead of sorting every answer the user ever had
    (a first page of 20 took 224 ms at 100,000 answers on SQLite)."""
    answers = _answers_base().filter(question__user_id=user.pk or 0)
    return _readers_only(answers, user=user).order_by("-question__created_at", "-question_id")


# What a viewer gets instead of an answer written from a source they may no longer view.
WITHHELD_MESSAGE = "This answer is withheld: it draws on a source you can no longer access."


def _prompt_sources(*, question_id: int | OuterRef) -> QuerySet[RetrievedSource]:
    """The sources given to the model for ``question_id``, or for a turn of its ``context``
    (the history its prompt held, whose answers it may echo).

    Every source in the prompt counts, not only the cited ones: the text may quote a
    source it does not cite."""
    # One level further out inside the context's subquery.
    outer = OuterRef(question_id) if isinstance(question_id, OuterRef) else question_id
    context = Question.context.through.objects.filter(from_question_id=outer)
    return RetrievedSource.objects.filter(
        Q(question_id=question_id) | Q(question_id__in=context.values("to_question_id")),
        prompt_number__isnull=False,
    )


def _hidden_prompt_sources(
    *, user: AnyUser, question_id: int | OuterRef
) -> QuerySet[RetrievedSource]:
    """The sources given to the model for ``question_id`` or its context
    (``_prompt_sources``) that ``user`` may not view now."""
    hidden = _prompt_sources(question_id=question_id).exclude(
        document__in=document_list_visible(user=user).values("pk")
    )
    # A removed document can be viewed by no one now; its snapshot stays shown only if
    # everyone could view the document when the answer was written (ADR 0022).
    return hidden.exclude(
        Q(document_public=True) & ~Exists(Document.objects.filter(pk=OuterRef("document_id")))
    )


def answer_withheld_q(*, user: AnyUser) -> Exists:
    """Answers withheld from ``user``: written from a source they may not view (now).

    The one rule for stored answers (``_hidden_prompt_sources``), as a filter; every
    transport (``answer_payload``), the prompt history (``conversation_history``) and the
    admin (``answer_admin_queryset``) apply it."""
    return Exists(_hidden_prompt_sources(user=user, question_id=OuterRef("question_id")))


def _replaced_restricted_passages(*, question_id: int | OuterRef) -> QuerySet[RetrievedSource]:
    """Prompt sources (``_prompt_sources``) whose document was not open to everyone when the
    answer was written and no longer holds the passage the answer was written from (edited,
    re-ingested): whoever may view the document now may view what it says now, not
    necessarily what it said then, when another audience could (ADR 0022's snapshot keeps
    that passage, and the answer may quote it)."""
    held = Chunk.objects.filter(document_id=OuterRef("document_id"), text=OuterRef("passage__text"))
    return _prompt_sources(question_id=question_id).filter(
        ~Exists(held), document_public=False, passage__isnull=False
    )


def _review_withheld_q(*, reviewer: AnyUser, question_id: OuterRef) -> Q:
    """Answers (or questions, after ``question_id``) a reviewer without ``review_all_answers``
    may not read in the admin: withheld from them (``_hidden_prompt_sources``), or written
    from a restricted passage the document no longer holds. Its asker still reads the
    latter (they were given the passage); a reviewer cannot be told who could read it."""
    return Q(Exists(_hidden_prompt_sources(user=reviewer, question_id=question_id))) | Q(
        Exists(_replaced_restricted_passages(question_id=question_id))
    )


def answer_is_withheld(*, answer: Answer, user: AnyUser) -> bool:
    return _hidden_prompt_sources(user=user, question_id=answer.question_id).exists()


def answers_withheld_ids(*, answers: Iterable[Answer], user: AnyUser) -> set[int]:
    """The ids of those of ``answers`` withheld from ``user`` (``answer_is_withheld`` of
    each), in one query."""
    ids = {answer.pk for answer in answers}
    if not ids:
        return set()
    withheld = Answer.objects.filter(pk__in=ids).filter(answer_withheld_q(user=user))
    return set(withheld.values_list("pk", flat=True))


# A source row shows its document's title and link, never its content: a body can be
# megabytes (and its signature 512 bytes), read for each of a page's sources.
_DOCUMENT_CONTENT = ("document__body", "document__near_signature")


def answer_final_sources(*, answer: Answer) -> list[RetrievedSource]:
    """The stored final Sources rows of ``answer``, in number order (no access check: the
    presenter re-checks each document for the viewer)."""
    return answers_final_sources(answers=[answer]).get(answer.question_id, [])


def answers_final_sources(*, answers: Iterable[Answer]) -> dict[int, list[RetrievedSource]]:
    """``answer_final_sources`` of each of ``answers`` by question id, in one query (a
    conversation's page shows every turn's)."""
    question_ids = {answer.question_id for answer in answers}
    if not question_ids:
        return {}
    rows = (
        RetrievedSource.objects.filter(question_id__in=question_ids, final_number__isnull=False)
        .select_related("document", "chunk", "passage")
        .defer(*_DOCUMENT_CONTENT)
        .order_by("question_id", "final_number", "rank")
    )
    by_question: dict[int, list[RetrievedSource]] = {}
    for row in rows:
        by_question.setdefault(row.question_id, []).append(row)
    return by_question


def answer_number_map(*, answer: Answer) -> dict[int, int]:
    """Each cited prompt number of ``answer`` to its final number, as its live ``done`` had
    it (empty when nothing was cited: the sources were kept as numbered)."""
    rows = RetrievedSource.objects.filter(
        question_id=answer.question_id,
        cited=True,
        prompt_number__isnull=False,
        final_number__isnull=False,
    ).values_list("prompt_number", "final_number")
    return {prompt: final for prompt, final in rows if prompt is not None and final is not None}


def answer_citations(*, answer: Answer) -> list[Citation]:
    """The answer's citations with their support, in text order (ADR 0023)."""
    return list(answer.citations.order_by("sentence", "number"))


def passages_still_current(*, rows: Iterable[RetrievedSource]) -> set[tuple[int, str]]:
    """``(document_id, text)`` of the rows' snapshotted passages that their documents still
    hold word for word (in any chunk: re-chunking an unchanged passage keeps it current)."""
    wanted = {(row.document_id, row.passage.text) for row in rows if row.passage and row.document}
    if not wanted:
        return set()
    found = Chunk.objects.filter(
        document_id__in={document_id for document_id, _ in wanted},
        text__in={text for _, text in wanted},
    ).values_list("document_id", "text")
    return {pair for pair in found if pair in wanted}


def api_token_get_active(*, token_hash: str) -> ApiToken | None:
    return (
        ApiToken.objects.select_related("user")
        .filter(token_hash=token_hash, revoked_at__isnull=True, user__is_active=True)
        .first()
    )


def answer_admin_queryset(*, reviewer: AnyUser) -> QuerySet[Answer]:
    """The answers ``reviewer`` may list, search, filter and open in the admin: all of them
    with ``review_all_answers``, else only those not withheld from them. Excluded, not
    shown as placeholders, so no count, filter, search or sort depends on what they hide.

    Each count is a subquery of its answer's own rows, not a join grouped per answer: the
    list's page (from the (created_at, id) index) counts its own rows only, and its
    counts, filters and dates read the answers table alone (Django drops an unused
    subquery; a join feeding an aggregate it keeps)."""
    answers = Answer.objects.all()
    # Candidates from documents the reviewer may not view are not counted either (nor
    # listed, see retrieved_sources_for_review): that they matched is itself a clue.
    sources = RetrievedSource.objects.filter(question_id=OuterRef("question_id"))
    if not user_may_review_all(user=reviewer):
        answers = answers.exclude(
            _review_withheld_q(reviewer=reviewer, question_id=OuterRef("question_id"))
        )
        retrieved = sources.filter(_reviewable_sources_q(reviewer=reviewer))
    else:
        retrieved = sources
    feedback = Feedback.objects.filter(answer_id=OuterRef("pk"))
    return (
        answers.select_related("question", "question__user")
        .annotate(
            retrieved_count=_count_of(retrieved, "pk", per="question_id"),
            cited_count=_count_of(
                sources.filter(cited=True), "document", per="question_id", distinct=True
            ),
            feedback_up=_count_of(
                feedback.filter(rating=Feedback.Rating.UP), "pk", per="answer_id"
            ),
            feedback_down=_count_of(
                feedback.filter(rating=Feedback.Rating.DOWN), "pk", per="answer_id"
            ),
        )
        .order_by("-created_at", "-id")
    )


# Every distinct provider of the stored answers, in order: from the provider index a step a
# provider (the next one after the last found), not every answer read and made distinct.
# Standard SQL, the same on SQLite and PostgreSQL.
_PROVIDERS_SQL = """
WITH RECURSIVE found(value) AS (
    SELECT MIN("provider") FROM "answers_answer"
    UNION ALL
    SELECT (SELECT MIN("provider") FROM "answers_answer" WHERE "provider" > found.value)
    FROM found WHERE found.value IS NOT NULL
)
SELECT value FROM found WHERE value IS NOT NULL
"""


def answer_providers_query() -> tuple[str, list[Any]]:
    """The SQL ``answer_providers_for_review`` runs for a reviewer who may read every
    answer, and its parameters (for a test of its plan)."""
    return _PROVIDERS_SQL, []


def answer_providers_for_review(*, reviewer: AnyUser) -> list[str]:
    """The providers of the answers ``reviewer`` may read in the admin, in order (the list's
    filter). A reviewer who may not read them all gets those of the ones they may read."""
    if not user_may_review_all(user=reviewer):
        readable = Answer.objects.exclude(answer_withheld_q(user=reviewer))
        return list(readable.order_by("provider").values_list("provider", flat=True).distinct())
    sql, params = answer_providers_query()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [value for (value,) in cursor.fetchall()]


def _count_of(rows: QuerySet[Any], field: str, *, per: str, distinct: bool = False) -> Coalesce:
    """How many ``rows`` (their non-null ``field``s) there are, as a subquery of one value;
    ``per``: the column the rows share with the outer query (grouped by, so one row)."""
    counted = rows.order_by().values(per).annotate(n=Count(field, distinct=distinct))
    return Coalesce(Subquery(counted.values("n"), output_field=IntegerField()), 0)


def _reviewable_sources_q(*, reviewer: AnyUser, path: str = "") -> Q:
    """Retrieval records (at ``path``) a reviewer may see: from a document they may view
    now, or from one deleted since that everyone could view when the answer was written
    (its snapshot stays readable, ADR 0022; the rule of ``_hidden_prompt_sources``). A
    document's title is never empty, so an empty one is the outer join finding no row."""
    visible = document_list_visible(user=reviewer).values("pk")
    return Q(**{f"{path}document__in": visible}) | Q(
        **{f"{path}document_public": True, f"{path}document__title__isnull": True}
    )


def retrieved_sources_for_review(*, question_id: int, reviewer: AnyUser) -> list[RetrievedSource]:
    """Every candidate of ``question_id`` with its fate, best first, as ``reviewer`` may see
    them in the admin: without those from documents they may not view (a dropped one, say:
    the asker could not view it either), unless they hold ``review_all_answers``."""
    rows = (
        RetrievedSource.objects.filter(question_id=question_id)
        # The passage too: the admin shows each cited one (a query per row without it).
        .select_related("document", "chunk", "passage")
        .defer(*_DOCUMENT_CONTENT)
        .order_by("rank")
    )
    if not user_may_review_all(user=reviewer):
        rows = rows.filter(_reviewable_sources_q(reviewer=reviewer))
    return list(rows)


def question_turn_for_review(*, question: Question, reviewer: AnyUser) -> int:
    """``question``'s turn as the admin shows it to ``reviewer``: its place among the turns
    of its conversation they may read (the rule of ``answer_admin_queryset``), as ranks are
    places in what is shown (``retrieved_sources_for_review``): a turn number past what they
    can find would tell them that withheld turns exist, and so what they hide."""
    if user_may_review_all(user=reviewer):
        return question.turn
    return (
        Question.objects.filter(conversation_id=question.conversation_id, turn__lte=question.turn)
        .exclude(_review_withheld_q(reviewer=reviewer, question_id=OuterRef("pk")))
        .count()
    )


def question_has_history(*, question: Question) -> bool:
    """Whether ``question``'s prompt held earlier turns (its ``context``): only then was it
    searched together with the one before it (``retrieval.search_hits``)."""
    return Question.context.through.objects.filter(from_question_id=question.pk).exists()


def user_get_current(*, user_id: int, session_key: str | None) -> Any:
    """The user as of now, or None when their session (if any) no longer holds them, the
    account was deactivated or its password changed since the session signed in: a
    long-lived socket re-checks this before each ask, as each page request is checked."""
    if session_key is None:
        return get_user_model().objects.filter(pk=user_id, is_active=True).first()
    # A fresh load: an expired or deleted session comes back empty.
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)
    session = store.load()
    backend_path = session.get(BACKEND_SESSION_KEY)
    if str(session.get(SESSION_KEY)) != str(user_id) or (
        backend_path not in settings.AUTHENTICATION_BACKENDS
    ):
        return None
    # Django's check of a request's session (``django.contrib.auth.get_user``), read only:
    # the backend that signed the session in still lets the user in, and the password
    # hash the session keeps is still the user's (a new password signs the other sessions
    # out), under the current secret key or one of its fallbacks. Django also flushes a
    # failed session and re-keys one signed under a fallback; a page request does that,
    # where the new cookie can reach the browser.
    user = load_backend(backend_path).get_user(user_id)
    if user is None or not user.is_active:
        return None
    if hasattr(user, "get_session_auth_hash"):
        kept = session.get(HASH_SESSION_KEY)
        fallbacks: Iterable[str] = getattr(user, "get_session_auth_fallback_hash", tuple)()
        if not kept or not any(
            constant_time_compare(kept, known)
            for known in (user.get_session_auth_hash(), *fallbacks)
        ):
            return None
    return user


_GAP_FIELDS = ("pk", "question_id", "question__text", "created_at", "status", "down", "support_min")


def gap_questions_for_review(
    *, reviewer: AnyUser, since: datetime, limit: int = 2000
) -> list[GapQuestion]:
    """The newest ``limit`` questions since ``since`` that got no answer, were voted down or
    have a weakly supported citation, as ``reviewer`` may see them (the admin's rule:
    withheld answers are left out, and so are documents they may not view among the nearest
    ones). Three queries, bounded by ``limit``."""
    answers = Answer.objects.filter(created_at__gte=since)
    visible_documents: QuerySet[Document] | None = None
    if not user_may_review_all(user=reviewer):
        answers = answers.exclude(
            _review_withheld_q(reviewer=reviewer, question_id=OuterRef("question_id"))
        )
        visible_documents = document_list_visible(user=reviewer)
    down = Exists(Feedback.objects.filter(answer=OuterRef("pk"), rating=Feedback.Rating.DOWN))
    rows = list(
        answers.annotate(down=down)
        .filter(Q(status=Answer.Status.NO_ANSWER) | Q(down=True) | Q(support_min__lt=SUPPORTED))
        .order_by("-created_at")
        .values_list(*_GAP_FIELDS)[:limit]
    )
    near_rows = RetrievedSource.objects.filter(
        question_id__in=[row[1] for row in rows],
        dropped_reason=RetrievedSource.Dropped.BELOW_THRESHOLD,
        document__isnull=False,
    )
    if visible_documents is not None:
        near_rows = near_rows.filter(document__in=visible_documents.values("pk"))
    near: dict[int, dict[int, tuple[int, str, float]]] = {}
    for question_id, document_id, title, score in near_rows.values_list(
        "question_id", "document_id", "document__title", "score"
    ):
        if title is None:
            continue  # deleted since
        kept = near.setdefault(question_id, {})
        if document_id not in kept or score > kept[document_id][2]:
            kept[document_id] = (document_id, title, score)
    questions = []
    for answer_id, question_id, text, created_at, status, voted_down, support_min in rows:
        reasons = tuple(
            reason
            for reason, applies in (
                ("no_answer", status == Answer.Status.NO_ANSWER),
                ("down_voted", voted_down),
                ("weak_support", support_min is not None and support_min < SUPPORTED),
            )
            if applies
        )
        questions.append(
            GapQuestion(
                question_id=question_id,
                answer_id=answer_id,
                text=text,
                asked_at=created_at,
                reasons=reasons,
                near=tuple(sorted(near.get(question_id, {}).values(), key=lambda d: -d[2])),
            )
        )
    return questions
