"""The one pipeline every transport iterates: references, then tokens, then done (or error).

``start_answer`` does everything that can be refused (validation, permission, the
conversation, retrieval) and stores the question before anything is streamed, so every
transport can turn a refusal into its own error *before* its stream starts, and the answer
has an id from the first event on. ``AnswerRun.events()`` then streams. The JSON view, the
SSE view, the WebSocket consumer and the ``ask`` command only iterate it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils import timezone

from . import presenters, selectors, services
from .citations import MarkerStreamFilter
from .conf import answers_settings
from .events import (
    CitationEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    ReferencesEvent,
    TokenEvent,
)
from .guards import GuardTripped, StreamLimits, guarded_stream
from .lane import Lane, lane_for_loop
from .models import Answer, Conversation
from .prompt import PriorTurn, Prompt, RewritePrompt
from .providers.base import ProviderError, QuestionRewriter, Usage
from .registry import get_provider
from .rendering import render_answer_html
from .retrieval import rerank, reranks, search_hits, sources_contending, sources_numbered
from .types import AnswerPayload, Candidate, NumberedSource, Reference, Retrieval

logger = logging.getLogger(__name__)

GENERIC_ERROR = "The answer could not be generated. Please try again."
# What a transport says when the database cannot be reached (code ``unavailable``).
DATABASE_UNAVAILABLE_MESSAGE = "The service is unavailable right now. Please try again shortly."
DATABASE_ERRORS = (OperationalError, InterfaceError)
STORE_PENDING_MESSAGE = (
    "The answer could not be saved: the database is unavailable. It will be saved as you "
    "saw it once the database is back."
)
# An answer whose outcome the database could not take is stored again after this many
# seconds, doubling up to the last, until its stream counts as abandoned.
STORE_RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0)
# Those stores, kept alive here (the generation that scheduled one has ended).
_pending_stores: set[asyncio.Task[None]] = set()

T = TypeVar("T")


class AskRefused(Exception):
    """A request refused before anything is stored or streamed. ``code`` names the reason;
    each transport maps codes to its own status or event in one table (api.HTTP_STATUS)."""

    code = "invalid"
    #: the stored answer the refusal is about, when there is one (a conflict names it)
    answer: Answer | None = None
    #: whole seconds after which asking again can pass (a limit's window), if known
    retry_after: int | None = None

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class QuestionInvalid(AskRefused):
    code = "invalid_question"


class AskForbidden(AskRefused):
    code = "forbidden"


class ConversationNotFound(AskRefused):
    code = "not_found"


class TooManyRequests(AskRefused):
    code = "rate_limited"


async def coalesced(events: AsyncIterator[Event], *, window: float) -> AsyncGenerator[Event, None]:
    """``events`` with consecutive tokens that arrive within ``window`` seconds of the first
    merged into one (fewer, larger frames); order and text are unchanged. ``window <= 0``
    passes every event through as it is."""
    if window <= 0:
        async for event in events:
            yield event
        return
    loop = asyncio.get_running_loop()
    iterator = aiter(events)
    pending: list[str] = []
    deadline = 0.0
    step: asyncio.Future[Event] | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(anext(iterator))
            timeout = max(0.0, deadline - loop.time()) if pending else None
            done, _ = await asyncio.wait({step}, timeout=timeout)
            if not done:
                yield TokenEvent("".join(pending))
                pending = []
                continue
            try:
                event = step.result()
            except StopAsyncIteration:
                break
            finally:
                step = None
            if isinstance(event, TokenEvent):
                if not pending:
                    deadline = loop.time() + window
                pending.append(event.text)
                continue
            if pending:
                yield TokenEvent("".join(pending))
                pending = []
            yield event
        if pending:
            yield TokenEvent("".join(pending))
    finally:
        # Cancelled or closed early: the pipeline's own clean-up must still run.
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await step


def clean_question(text: object) -> str:
    if not isinstance(text, str):
        raise QuestionInvalid("question must be a string")
    cleaned = text.strip()
    if not cleaned:
        raise QuestionInvalid("question must not be blank")
    limit = int(answers_settings.MAX_QUESTION_LENGTH)
    if len(cleaned) > limit:
        raise QuestionInvalid(f"question must be at most {limit} characters")
    if "\x00" in cleaned:
        raise QuestionInvalid("question must not contain NUL characters")
    try:
        # JSON can carry a lone surrogate ("\\ud800"); it is no text and no database stores it.
        cleaned.encode("utf-8")
    except UnicodeEncodeError:
        raise QuestionInvalid("question must be valid Unicode text") from None
    return cleaned


def _failure_reason(exc: BaseException) -> str:
    """For the admin: what went wrong, without a stack trace (that is in the log)."""
    if isinstance(exc, GuardTripped | ProviderError):
        return f"{type(exc).__name__}: {exc}"[:500]
    return f"unexpected {type(exc).__name__}"


def _ms_since(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


@dataclass
class AnswerRun:
    """A stored question whose answer is ready to be generated and streamed."""

    answer: Answer
    user: User
    conversation_id: str
    turn: int
    sources: list[NumberedSource]
    prompt: Prompt
    started: float
    began: bool = field(default=False, init=False)
    #: stored as the error of an answer stopped before it ended (a server shutting down
    #: says so instead)
    stop_reason: str = field(default="stopped by the client", init=False)
    #: the outcome could not be stored (the database away) and is being stored again
    store_pending: bool = field(default=False, init=False)

    @property
    def anchor_prefix(self) -> str:
        return presenters.answer_anchor_prefix(answer_id=self.answer.pk)

    def references(self, sources: list[NumberedSource] | None = None) -> list[Reference]:
        chosen = self.sources if sources is None else sources
        return [
            presenters.reference_from_source(
                source=source, anchor_prefix=self.anchor_prefix, index=index
            )
            for index, source in enumerate(chosen, start=1)
        ]

    async def stopped(self) -> DoneEvent:
        """The last word of a run its client stopped (``events()`` cancelled or closed)."""
        if not self.began:
            # Stopped before generation began: nothing was generated or stored yet.
            return await self._complete("", Answer.Status.INTERRUPTED, None, self.stop_reason)
        return await stored_done(answer_id=self.answer.pk, user=self.user)

    async def fail(self, reason: str) -> None:
        """Store a run that could not be streamed at all as failed (never begun)."""
        await self._complete("", Answer.Status.FAILED, None, reason)

    async def events(self) -> AsyncGenerator[Event, None]:
        yield ReferencesEvent(
            answer_id=self.answer.pk,
            conversation_id=self.conversation_id,
            turn=self.turn,
            references=tuple(self.references()),
        )
        if not self.sources:
            message = str(answers_settings.NO_ANSWER_MESSAGE)
            yield TokenEvent(message)
            yield await self._complete(message, Answer.Status.NO_ANSWER, first_token_ms=None)
            return

        raw: list[str] = []
        first_token_ms: int | None = None
        outcome = Answer.Status.INTERRUPTED
        shown = MarkerStreamFilter(len(self.sources))
        usage: Usage | None = None
        provider = get_provider()
        deltas = guarded_stream(lambda: provider.stream(self.prompt), StreamLimits.from_settings())
        self.began = True  # from here on, however it ends, the outcome is stored
        try:
            async with aclosing(deltas):  # type: ignore[type-var]
                async for delta in deltas:
                    if isinstance(delta, Usage):
                        usage = delta
                        continue
                    if first_token_ms is None:
                        first_token_ms = _ms_since(self.started)
                    raw.append(delta)
                    for event in self._shown(shown, shown.feed(delta)):
                        yield event
            for event in self._shown(shown, shown.close()):
                yield event
            outcome = Answer.Status.COMPLETE
        except Exception as exc:
            # Any provider failure, guard or bug ends this answer only; never the server.
            logger.exception("Generation failed for answer %s", self.answer.pk)
            outcome = Answer.Status.FAILED
            reason = _failure_reason(exc)
        finally:
            if outcome == Answer.Status.INTERRUPTED:
                reason = self.stop_reason  # read now: a shutdown sets it on the way
            if outcome != Answer.Status.COMPLETE:
                # Stopped, disconnected or failed: keep what was generated, with consistent
                # references, whatever happens to the caller.
                await asyncio.shield(
                    self._complete_or_fail("".join(raw), outcome, first_token_ms, reason, usage)
                )
        if outcome == Answer.Status.FAILED:
            yield ErrorEvent(GENERIC_ERROR, answer_id=self.answer.pk, code="generation_failed")
            return
        done = await self._complete_or_fail("".join(raw), outcome, first_token_ms, usage=usage)
        if done is None:
            yield self._not_stored_event()
            return
        yield done

    def _not_stored_event(self) -> ErrorEvent:
        if self.store_pending:
            # Not the asker's question that failed: its answer waits for the database.
            return ErrorEvent(STORE_PENDING_MESSAGE, answer_id=self.answer.pk, code="unavailable")
        return ErrorEvent(GENERIC_ERROR, answer_id=self.answer.pk, code="generation_failed")

    async def _complete_or_fail(
        self,
        raw_text: str,
        status: str,
        first_token_ms: int | None,
        error: str = "",
        usage: Usage | None = None,
    ) -> DoneEvent | None:
        """``_complete``, or, when the store refuses the text (a provider's text no database
        holds), the answer stored as failed without it and None: it must never stay
        ``streaming``, holding one of its asker's concurrent answers."""
        outcome = self._outcome(raw_text, status, first_token_ms, error, usage)
        try:
            return await self._store(outcome, status=status)
        except services.AnswerAlreadyFinal:
            raise
        except DATABASE_ERRORS:
            # The database is away (not the text's fault): the outcome is kept here and
            # stored once it is back, so the answer neither loses what its asker saw nor
            # stays ``streaming`` (holding one of their concurrent answers) until it counts
            # as abandoned.
            logger.exception("Storing answer %s failed; storing it again later", self.answer.pk)
            with contextlib.suppress(Exception):  # the thread's dead connection, given back
                await sync_to_async(release_connection)()
            self.store_pending = True
            task = asyncio.create_task(_store_when_back(self.answer, outcome))
            _pending_stores.add(task)
            task.add_done_callback(_pending_stores.discard)
            return None
        except Exception as exc:
            logger.exception("Storing answer %s failed; storing it as failed", self.answer.pk)
            reason = f"the answer could not be stored ({type(exc).__name__}); its text is lost"
            await self._complete("", Answer.Status.FAILED, first_token_ms, reason[:500])
            return None

    def _shown(self, shown: MarkerStreamFilter, text: str) -> list[TokenEvent | CitationEvent]:
        """Token and first-citation events for text that has become safe to show."""
        if not text:
            return []
        events: list[TokenEvent | CitationEvent] = [TokenEvent(text)]
        for number in shown.take_new_citations():
            events.append(CitationEvent(number, self.sources[number - 1].document_id))
        return events

    async def _complete(
        self,
        raw_text: str,
        status: str,
        first_token_ms: int | None,
        error: str = "",
        usage: Usage | None = None,
    ) -> DoneEvent:
        return await self._store(
            self._outcome(raw_text, status, first_token_ms, error, usage), status=status
        )

    async def _store(self, outcome: dict[str, Any], *, status: str) -> DoneEvent:
        completed = await sync_to_async(services.answer_complete)(**outcome)
        return self._done(completed, status=status)

    def _outcome(
        self,
        raw_text: str,
        status: str,
        first_token_ms: int | None,
        error: str = "",
        usage: Usage | None = None,
    ) -> dict[str, Any]:
        """``services.answer_complete``'s arguments: this run's outcome, to store now."""
        return {
            "answer": self.answer,
            "raw_text": raw_text,
            "sources": self.sources,
            "status": status,
            "error": error,
            "first_token_ms": first_token_ms,
            "total_ms": _ms_since(self.started),
            "usage": usage,
        }

    def _done(self, completed: services.CompletedAnswer, *, status: str) -> DoneEvent:
        finalized = completed.finalized
        references = self.references(finalized.sources)
        text = finalized.text
        return DoneEvent(
            answer=AnswerPayload(
                answer_id=self.answer.pk,
                conversation_id=self.conversation_id,
                turn=self.turn,
                status=status,
                text=text,
                html=render_answer_html(
                    text, anchor_prefix=self.anchor_prefix, source_count=len(references)
                ),
                references=tuple(references),
            ),
            number_map=finalized.number_map,
        )


def retrieve_sources(
    *, user: User, question: str, previous_question: str | None = None, standalone: str = ""
) -> Retrieval:
    """Retrieval and source selection for ``user`` exactly as an answer gets them: search,
    threshold, ranking, rerank, document cap, access, numbering. Stores nothing (``manage.py
    evaluate`` measures this); no sources means the no-answer message. ``standalone`` is a
    follow-up's rewrite, searched instead of it (``REWRITE_FOLLOWUPS``). In one call: an
    answer's retrieval reranks apart (``_retrieve``)."""
    contenders = _retrieval_reads(
        user=user, question=question, previous_question=previous_question, standalone=standalone
    )
    rerank_error = rerank(contenders.ranked, question=contenders.question)
    return _retrieval_selected(user=user, contenders=contenders, rerank_error=rerank_error)


@dataclass(frozen=True)
class _Contenders:
    """Retrieval's reads done: the candidates, and those competing for the places (ranked,
    not yet reranked)."""

    candidates: list[Candidate]
    ranked: list[Candidate]
    # Each candidate document's visibility to the asker, read with its chunk.
    read: dict[int, bool]
    question: str  # what was searched and is reranked on
    standalone: str


def _retrieval_reads(
    *, user: User, question: str, previous_question: str | None = None, standalone: str = ""
) -> _Contenders:
    # An asker who may view every document searches them all: the same hits and scores as
    # the scoped search (ADR 0009), without each of its statements testing every document
    # against the scope. One cheap read decides (ADR 0009, "Later").
    everything = not selectors.document_list_hidden(user=user).exists()
    hits = search_hits(
        question=question,
        previous_question=previous_question,
        documents=None if everything else selectors.document_list_visible(user=user),
        standalone=standalone,
    )
    # Each candidate's access is read with its chunk (one query fewer), and checked by
    # document_visible_ids all the same.
    candidates = selectors.candidates_for_hits(
        hits=((h.chunk_id, h.score) for h in hits), viewer=user
    )
    searched = standalone or question
    return _Contenders(
        candidates=list(candidates),
        ranked=sources_contending(candidates, question=searched),
        read={c.document_id: bool(c.document_visible) for c in candidates},
        question=searched,
        standalone=standalone,
    )


def _retrieval_selected(*, user: User, contenders: _Contenders, rerank_error: str) -> Retrieval:
    read = contenders.read
    sources = sources_numbered(
        contenders.ranked,
        visible_document_ids=lambda ids: selectors.document_visible_ids(
            user=user, document_ids=ids, read=read
        ),
    )
    return Retrieval(
        candidates=contenders.candidates,
        sources=sources,
        rerank_error=rerank_error,
        search_text=contenders.standalone,
    )


@dataclass(frozen=True)
class _Context:
    """What an ask needs from the store before retrieval: the conversation and the turns
    the asker may still read."""

    conversation: Conversation | None
    history: list[PriorTurn]
    # The questions of ``history``: the new question's context (what its answer may echo).
    history_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Rewrite:
    text: str = ""
    ms: int | None = None
    error: str = ""


def _context(*, user: User, conversation_id: uuid.UUID | None) -> _Context:
    try:
        # Before any retrieval work, so a flood costs one counting query each (the
        # permission is read in the same query).
        services.question_check_allowed(user=user)
    except services.AskNotPermitted:
        raise AskForbidden("You do not have permission to ask questions.") from None
    except services.LimitExceeded as exc:
        raise TooManyRequests(str(exc), retry_after=exc.retry_after) from None
    if conversation_id is None:
        return _Context(conversation=None, history=[])
    try:
        conversation = selectors.conversation_get_for_user(
            conversation_id=conversation_id, user=user
        )
    except selectors.NotFound:
        raise ConversationNotFound("conversation not found") from None
    # Only turns the asker may still read: a withheld answer never enters a prompt again.
    history, history_ids = selectors.conversation_history(conversation=conversation, user=user)
    return _Context(conversation=conversation, history=history, history_ids=history_ids)


async def _standalone(
    provider: QuestionRewriter, *, question: str, history: list[PriorTurn]
) -> _Rewrite:
    """A follow-up rewritten to stand alone by ``provider`` (``_rewrites``). Bounded by
    ``REWRITE_TIMEOUT``; on any failure the question is searched as it is (with the turn
    before) and the reason is kept for the admin."""
    started = time.perf_counter()
    prompt = RewritePrompt(question=question, history=tuple(history))
    try:
        async with asyncio.timeout(float(answers_settings.REWRITE_TIMEOUT)):
            text = " ".join((await provider.rewrite(prompt)).split())
        if not text:
            raise ProviderError("the rewrite was empty")
    except TimeoutError:
        error = f"timed out after {float(answers_settings.REWRITE_TIMEOUT):g} s"
        return _Rewrite(ms=_ms_since(started), error=error)
    except Exception as exc:
        logger.warning("Rewriting a follow-up failed; searching it as asked", exc_info=True)
        return _Rewrite(ms=_ms_since(started), error=_failure_reason(exc))
    # Only ever a search query: it may not be longer than a question may be.
    return _Rewrite(text=text[: int(answers_settings.MAX_QUESTION_LENGTH)], ms=_ms_since(started))


def _prepare(
    *,
    user: User,
    question: str,
    context: _Context,
    rewrite: _Rewrite,
    retrieval: Retrieval,
    retrieval_ms: int,
    started: float,
) -> AnswerRun:
    history = context.history
    provider = get_provider()
    try:
        created = services.question_create(
            user=user,
            conversation=context.conversation,
            text=question,
            candidates=retrieval.candidates,
            provider=provider.name,
            model=provider.model,
            retrieval_ms=retrieval_ms,
            search_text=retrieval.search_text,
            rewrite_ms=rewrite.ms,
            rewrite_error=rewrite.error,
            rerank_error=retrieval.rerank_error,
            context_ids=context.history_ids,
        )
    except services.LimitExceeded as exc:  # the check that holds (the one above may race)
        raise TooManyRequests(str(exc), retry_after=exc.retry_after) from None
    prompt = Prompt(
        question=question,
        sources=tuple(source.as_prompt_source() for source in retrieval.sources),
        history=tuple(history),
    )
    return AnswerRun(
        answer=created.answer,
        user=user,
        conversation_id=str(created.conversation.pk),
        turn=created.question.turn,
        sources=retrieval.sources,
        prompt=prompt,
        started=started,
    )


# Retrieval only reads (and may wait on a reranker). On PostgreSQL it runs on threads of
# its own, one connection each, so concurrent questions search at once instead of queuing
# on the one thread all other database work shares (ADR 0029).
_retrieval_pools: dict[int, ThreadPoolExecutor] = {}  # by size (settings may change)
_retrieval_pools_lock = threading.Lock()


def _store_apart(outcome: dict[str, Any]) -> None:
    """Store an answer's outcome on a thread of its own (the shared thread keeps serving
    while the database is away), giving the connection back after."""
    try:
        services.answer_complete(**outcome)
    finally:
        release_connection()


async def _store_when_back(answer: Answer, outcome: dict[str, Any]) -> None:
    """Store ``outcome`` once the database takes it again; give up when the answer counts
    as abandoned anyway (services.stream_abandoned_cutoff: its readers and its asker's
    limit already ignore it). A process told to stop waits for it for what is left of its
    SHUTDOWN_GRACE (``answer_pending_stores_wait``); one that ends first loses it the same
    way."""
    attempt = 0
    while True:
        await asyncio.sleep(STORE_RETRY_DELAYS[min(attempt, len(STORE_RETRY_DELAYS) - 1)])
        attempt += 1
        try:
            await sync_to_async(_store_apart, thread_sensitive=False)(outcome)
        except services.AnswerAlreadyFinal:
            return  # ended meanwhile (a stop that reached the database first)
        except DATABASE_ERRORS:
            if answer.created_at < services.stream_abandoned_cutoff(now=timezone.now()):
                logger.error("Answer %s could not be stored before it was abandoned", answer.pk)
                return
            continue
        except Exception:
            logger.exception("Storing answer %s again failed", answer.pk)
            return
        logger.info("Answer %s stored once the database was back", answer.pk)
        return


async def answer_pending_stores_wait(*, timeout: float) -> int:
    """Wait up to ``timeout`` seconds for the outcomes kept while the database was away
    (``_store_when_back``) to be stored, as a process that is told to stop does; how many
    are still not stored."""
    loop = asyncio.get_running_loop()
    tasks = [t for t in _pending_stores if not t.done() and t.get_loop() is loop]
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
    return sum(1 for t in tasks if not t.done())


def answer_pending_stores() -> int:
    """Outcomes of this process's loop still waiting for the database."""
    loop = asyncio.get_running_loop()
    return sum(1 for t in _pending_stores if not t.done() and t.get_loop() is loop)


def _retrieval_executor() -> ThreadPoolExecutor | None:
    threads = int(answers_settings.RETRIEVAL_THREADS)
    if threads == 0 or connection.vendor != "postgresql":
        return None
    with _retrieval_pools_lock:
        if threads not in _retrieval_pools:
            _retrieval_pools[threads] = ThreadPoolExecutor(
                threads, thread_name_prefix="answers-retrieval"
            )
        return _retrieval_pools[threads]


def release_connection() -> None:
    """Give this thread's database connection back (to the pool, or closed unless
    ``CONN_MAX_AGE`` keeps it) as a request's end would. An answer streams for seconds
    without the database, and a JSON or SSE ask's thread would otherwise hold a pooled
    connection to the end of the response. Never inside a transaction (tests run in one)."""
    if not connection.in_atomic_block:
        close_old_connections()


def _then_release(step: Callable[..., T]) -> Callable[..., T]:
    """``step``, then the thread's connection given back. Around every step before the
    answer streams: between them the ask waits on a retrieval thread (which needs a
    connection of its own from the same pool: holding one while waiting for it could
    leave the pool empty and every ask waiting), a rewrite or the provider."""

    def released(**kwargs: Any) -> T:
        try:
            return step(**kwargs)
        finally:
            release_connection()

    return released


async def _on_retrieval_thread(step: Callable[..., T], **kwargs: Any) -> T:
    """``step`` on a retrieval thread (giving its connection back after), or on the
    database thread where retrieval runs there."""
    executor = _retrieval_executor()
    if executor is None:
        return await sync_to_async(step)(**kwargs)
    return await sync_to_async(_then_release(step), thread_sensitive=False, executor=executor)(
        **kwargs
    )


# A reranker waits on the network (an HTTP reranker up to RERANK_TIMEOUT): on threads of
# its own, never the thread all database work shares (on SQLite retrieval runs there) nor
# a retrieval thread. More reranks at once than threads queue for one (RERANK_THREADS).
_rerank_pool: ThreadPoolExecutor | None = None


def _rerank_executor() -> ThreadPoolExecutor:
    global _rerank_pool
    with _retrieval_pools_lock:
        if _rerank_pool is None:
            _rerank_pool = ThreadPoolExecutor(
                int(answers_settings.RERANK_THREADS), thread_name_prefix="answers-rerank"
            )
        return _rerank_pool


async def _retrieve(lane: Lane, **kwargs: Any) -> Retrieval:
    if not reranks():
        return await _on_retrieval_thread(retrieve_sources, **kwargs)
    contenders = await _on_retrieval_thread(_retrieval_reads, **kwargs)
    # Out of the lane meanwhile too: slow reranks must not hold every place (ADR 0017).
    async with lane.aside():
        rerank_error = await sync_to_async(
            _rerank_apart, thread_sensitive=False, executor=_rerank_executor()
        )(contenders)
    return await _on_retrieval_thread(
        _retrieval_selected, user=kwargs["user"], contenders=contenders, rerank_error=rerank_error
    )


def _rerank_apart(contenders: _Contenders) -> str:
    return rerank(contenders.ranked, question=contenders.question)


def _start_first(*, user: User, question: str, started: float) -> AnswerRun:
    """``start_answer``'s steps for a first question, in one call on the database thread."""
    context = _context(user=user, conversation_id=None)
    retrieval = retrieve_sources(user=user, question=question)
    return _prepare(
        user=user,
        question=question,
        context=context,
        rewrite=_Rewrite(),
        retrieval=retrieval,
        retrieval_ms=_ms_since(started),
        started=started,
    )


def preparing_lane() -> Lane:
    """This event loop's preparing lane (``answers.lane``): enough asks at once to keep
    every thread they use busy (the shared database thread and, on PostgreSQL, the
    retrieval threads), few enough that each runs to its end before later ones begin."""
    threads = int(answers_settings.RETRIEVAL_THREADS) if _retrieval_executor() else 0
    return lane_for_loop(capacity=threads + 2)


def _rewrites(history: list[PriorTurn]) -> QuestionRewriter | None:
    """The provider that rewrites this follow-up, if one does (``REWRITE_FOLLOWUPS``)."""
    provider = get_provider()
    if history and answers_settings.REWRITE_FOLLOWUPS and isinstance(provider, QuestionRewriter):
        return provider
    return None


async def start_answer(
    *, user: User, question: object, conversation_id: uuid.UUID | None = None
) -> AnswerRun:
    """Validate, retrieve and store the question; raises ``AskRefused`` before any event.
    Its steps take a turn in the preparing lane (a transport may have taken it already)."""
    cleaned = clean_question(question)
    started = time.perf_counter()
    lane = preparing_lane()
    # A request's thread may hold a pooled connection (its session's): never while it
    # waits for asks that need connections from the same pool.
    async with lane.turn(before_waiting=sync_to_async(release_connection)):
        if conversation_id is None and _retrieval_executor() is None and not reranks():
            # A first question: no earlier turn to rewrite it with, and retrieval runs on
            # the one database thread anyway. One step, so one connection: on SQLite each
            # new one parses the whole schema again (ADR 0035). Not with a reranker, which
            # must not wait on the network there (``_retrieve``).
            return await sync_to_async(_then_release(_start_first))(
                user=user, question=cleaned, started=started
            )
        context = await sync_to_async(_then_release(_context))(
            user=user, conversation_id=conversation_id
        )
        history = context.history
        rewrite = _Rewrite()
        rewriter = _rewrites(history)
        if rewriter is not None:
            # Waits on the network: off the database thread, and out of the lane meanwhile.
            async with lane.aside():
                rewrite = await _standalone(rewriter, question=cleaned, history=history)
        retrieval = await _retrieve(
            lane,
            user=user,
            question=cleaned,
            previous_question=history[-1].question if history else None,
            standalone=rewrite.text,
        )
        return await sync_to_async(_then_release(_prepare))(
            user=user,
            question=cleaned,
            context=context,
            rewrite=rewrite,
            retrieval=retrieval,
            retrieval_ms=_ms_since(started),
            started=started,
        )


def stored_done_event(*, answer: Answer, user: Any) -> DoneEvent:
    """``answer``'s ``done`` from the store, as ``user`` may see it now, with the same
    ``number_map`` its live ``done`` had (none for a withheld one: its notice cites nothing)."""
    payload = presenters.answer_payload(answer=answer, user=user)
    if payload.withheld or answer.status == Answer.Status.STREAMING:
        return DoneEvent(answer=payload)
    return DoneEvent(answer=payload, number_map=selectors.answer_number_map(answer=answer))


def _stored_done(answer_id: int, user: User) -> DoneEvent:
    answer = selectors.answer_get_for_user(answer_id=answer_id, user=user)
    return stored_done_event(answer=answer, user=user)


async def stored_done(*, answer_id: int, user: User) -> DoneEvent:
    """A finished answer's last word, from the store: after a stop (the stream stored the
    partial answer as interrupted), or once its stream log has expired."""
    return await sync_to_async(_stored_done)(answer_id, user)


async def answer_question(
    *, user: User, question: object, conversation_id: uuid.UUID | None = None
) -> DoneEvent | ErrorEvent:
    """Run the whole pipeline here and return its last event (tests; the JSON API asks
    through ``streams.answer_stream_complete``)."""
    run = await start_answer(user=user, question=question, conversation_id=conversation_id)
    last: DoneEvent | ErrorEvent | None = None
    async for event in run.events():
        if isinstance(event, DoneEvent | ErrorEvent):
            last = event
    assert last is not None
    return last
