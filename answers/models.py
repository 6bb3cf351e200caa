from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class Document(models.Model):
    """A document of the corpus: its text, where it came from and who may view it."""

    class Access(models.TextChoices):
        EVERYONE = "everyone", "Everyone who may ask"
        GROUPS = "groups", "Members of the chosen groups"

    title = models.CharField(max_length=300)
    url = models.URLField(max_length=1000, blank=True, help_text="Where the original lives.")
    source_key = models.CharField(
        max_length=1000,
        unique=True,
        help_text="Path or key the document was ingested from; re-ingesting it updates it.",
    )
    content_hash = models.CharField(max_length=64, editable=False)
    body = models.TextField()
    # MinHash of the body (answers.duplicates.body_signature, ADR 0032), so retrieval can
    # tell near-duplicate documents apart without reading their bodies.
    near_signature = models.BinaryField(max_length=512, editable=False, null=True)
    # How many chunks it has, written with them (services): document ranking reads each
    # candidate document's size (answers.ranking) instead of counting its chunks per
    # question. Nullable only so that SQLite adds the column in place (migration 0016).
    chunk_count = models.PositiveIntegerField(null=True, editable=False)
    access = models.CharField(max_length=16, choices=Access.choices, default=Access.EVERYONE)
    groups = models.ManyToManyField(
        Group,
        blank=True,
        related_name="answer_documents",
        help_text="With 'Members of the chosen groups', only these groups' members see it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title", "id"]
        # Every scoped search reads which documents are in or out of the asker's scope
        # (ADR 0009), some of its statements more than once: with the id in the index that
        # is an index-only scan on PostgreSQL too, not a read of every document's row
        # (signature, title, short bodies: some 1 KB each). SQLite's indexes hold the rowid.
        indexes = [
            models.Index(fields=["access", "id"], name="answers_document_access_id"),
            # The admin's list and autocomplete page documents in this order (migration 0020).
            models.Index(fields=["title", "id"], name="answers_document_title"),
        ]

    def __str__(self) -> str:
        return self.title

    # No get_absolute_url: the admin's shortcut view would redirect for every existing id,
    # whatever the viewer may read (DocumentAdmin.view_on_site links the page instead).


class Chunk(models.Model):
    """A passage of a document, as the search index holds it."""

    # No index of its own: the unique (document, ordinal) index below serves lookups by
    # document (migration 0014: one B-tree fewer written per chunk).
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    start = models.PositiveIntegerField(help_text="Offset of the chunk in the document body.")
    end = models.PositiveIntegerField()

    class Meta:
        ordering = ["document_id", "ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["document", "ordinal"], name="answers_chunk_ordinal")
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.ordinal}"

    @property
    def anchor(self) -> str:
        return f"chunk-{self.ordinal}"


class Conversation(models.Model):
    """One user's questions in order; a follow-up is asked within one."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: the (owner, last_at) index leads with it.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="answer_conversations",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When its latest question was asked (services.question_create), so the history lists
    # conversations by their last activity from an index, not by reading every question.
    last_at = models.DateTimeField(null=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "last_at"], name="answers_conversation_recent")]

    def __str__(self) -> str:
        return str(self.id)


class Question(models.Model):
    """A question as it was asked, and what retrieval did with it."""

    # No index of its own: the unique (conversation, turn) index leads with it.
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="questions", db_index=False
    )
    turn = models.PositiveIntegerField()
    text = models.TextField()
    # Indexed with created_at (Meta): the per-user limits count the last minute's questions
    # at every ask, which an index on the user alone answered by reading all of them.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="answer_questions",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # How retrieval went, for reviewers (the admin's Retrieval section).
    search_text = models.TextField(
        blank=True,
        help_text="The follow-up rewritten to stand alone, as searched (REWRITE_FOLLOWUPS).",
    )
    rewrite_ms = models.PositiveIntegerField(null=True, blank=True)
    rewrite_error = models.CharField(
        max_length=500, blank=True, help_text="Why the rewrite was not used."
    )
    rerank_error = models.CharField(
        max_length=500, blank=True, help_text="Why the reranker's order was not used."
    )
    # The earlier turns this question's prompt (and rewrite) held as history, and theirs in
    # turn: whatever its answer may echo. It is withheld when one of them is (access.md).
    context = models.ManyToManyField("self", symmetrical=False, related_name="+", blank=True)

    class Meta:
        ordering = ["conversation_id", "turn"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "turn"], name="answers_question_turn")
        ]
        indexes = [models.Index(fields=["user", "created_at"], name="answers_question_user_time")]
        permissions = [("ask_question", "Can ask questions")]

    def __str__(self) -> str:
        return self.text[:80]


class Passage(models.Model):
    """A passage's text as an answer was written from it, stored once per distinct text
    (``digest`` is its SHA-256), so re-ingesting a document never changes old evidence."""

    digest = models.CharField(max_length=64, unique=True)
    text = models.TextField()

    def __str__(self) -> str:
        return self.text[:80]


class RetrievedSource(models.Model):
    """One retrieved chunk and its fate: numbered for the prompt, or dropped and why."""

    class Dropped(models.TextChoices):
        BELOW_THRESHOLD = "below_threshold", "Below the score threshold"
        DOCUMENT_CAP = "document_cap", "Over the per-document chunk cap"
        NO_ACCESS = "no_access", "The asking user may not view it"
        NEAR_DUPLICATE = "near_duplicate", "A near-duplicate of a higher-ranked source"
        SOURCE_LIMIT = "source_limit", "Over the source limit"

    # No index of its own: the (question, prompt_number) index leads with it.
    question = models.ForeignKey(
        Question, on_delete=models.CASCADE, related_name="retrieved_sources", db_index=False
    )
    # A record of what was retrieved outlives the document: deleting it leaves the id (no
    # constraint, nothing cascades), and the answer then says the source was removed.
    document = models.ForeignKey(
        Document, on_delete=models.DO_NOTHING, db_constraint=False, null=True, related_name="+"
    )
    chunk = models.ForeignKey(Chunk, on_delete=models.SET_NULL, null=True, related_name="+")
    # Snapshots taken when the answer is finalized, for every source in the prompt.
    passage = models.ForeignKey(
        Passage, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    document_title = models.CharField(max_length=300, blank=True)
    chunk_ordinal = models.PositiveIntegerField(null=True, blank=True)
    document_public = models.BooleanField(
        default=False, help_text="Everyone who may ask could view the document then."
    )
    rank = models.PositiveIntegerField(help_text="1-based position in the search results.")
    score = models.FloatField(help_text="Normalized search score, 0..1.")
    rerank_score = models.FloatField(null=True, blank=True)
    prompt_number = models.PositiveIntegerField(
        null=True, blank=True, help_text="[n] in the prompt; empty when dropped."
    )
    dropped_reason = models.CharField(max_length=32, choices=Dropped.choices, blank=True)
    final_number = models.PositiveIntegerField(
        null=True, blank=True, help_text="Number in the final Sources list."
    )
    cited = models.BooleanField(default=False, help_text="The final text cites it.")

    class Meta:
        ordering = ["question_id", "rank"]
        indexes = [models.Index(fields=["question", "prompt_number"])]

    def __str__(self) -> str:
        return f"{self.question_id} rank {self.rank}"


class Answer(models.Model):
    """The answer to one question: its text as generated and as finalized, how it ended."""

    class Status(models.TextChoices):
        """Streaming until the stream ends; then how it ended."""

        STREAMING = "streaming", "Streaming"
        COMPLETE = "complete", "Complete"
        NO_ANSWER = "no_answer", "No answer"
        FAILED = "failed", "Failed"
        INTERRUPTED = "interrupted", "Interrupted"

    question = models.OneToOneField(Question, on_delete=models.CASCADE, related_name="answer")
    raw_text = models.TextField(blank=True, help_text="As generated, before any correction.")
    final_text = models.TextField(blank=True, help_text="After citations were finalized.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STREAMING)
    error = models.TextField(blank=True, help_text="Why it failed or was interrupted.")
    citations_fallback = models.BooleanField(
        default=False, help_text="The text cited nothing, so every source was kept."
    )
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    retrieval_ms = models.PositiveIntegerField(null=True, blank=True)
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    total_ms = models.PositiveIntegerField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # How well the cited passages support the cited sentences (answers.support, ADR 0023):
    # the weakest citation and the mean; empty when the answer cites nothing.
    support_min = models.FloatField(null=True, blank=True, db_index=True)
    support_mean = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    reviewed = models.BooleanField(default=False)
    review_note = models.TextField(blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "created_at"]),
            # The admin's list pages in this order (read backwards), its date hierarchy
            # reads the first and last, the content-gap report a period: none sorts or
            # scans every answer (migration 0020).
            models.Index(fields=["created_at", "id"], name="answers_answer_recent"),
            # The admin list's provider filter finds each provider from it, a step each
            # (selectors.answer_providers_query), not by reading every answer.
            models.Index(fields=["provider"], name="answers_answer_provider"),
        ]
        permissions = [
            (
                "review_all_answers",
                "Can review every answer and document in the admin, whatever its access",
            )
        ]

    def __str__(self) -> str:
        return f"Answer {self.pk} ({self.status})"


class Citation(models.Model):
    """One citation of a finalized answer and how well its passage supports the claim."""

    answer = models.ForeignKey(Answer, on_delete=models.CASCADE, related_name="citations")
    sentence = models.PositiveIntegerField(help_text="0-based position among cited claims.")
    claim = models.TextField()
    number = models.PositiveIntegerField(help_text="[n] in the final text.")
    support = models.FloatField(help_text="0..1: the claim's share found in the passage.")

    class Meta:
        ordering = ["answer_id", "sentence", "number"]

    def __str__(self) -> str:
        return f"[{self.number}] {self.claim[:60]}"


class ApiToken(models.Model):
    """A bearer token for the REST API; only its hash is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_api_tokens"
    )
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=16, editable=False, help_text="Shown to tell tokens apart."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Feedback(models.Model):
    """One user's rating of an answer (one per user and answer), with a comment."""

    class Rating(models.TextChoices):
        UP = "up", "Helpful"
        DOWN = "down", "Not helpful"

    # No index of its own: the unique (answer, user) index leads with it.
    answer = models.ForeignKey(
        Answer, on_delete=models.CASCADE, related_name="feedback", db_index=False
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_feedback"
    )
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=4000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["answer", "user"], name="answers_feedback_once")
        ]
        verbose_name_plural = "feedback"

    def __str__(self) -> str:
        return f"{self.rating} on {self.answer_id}"
