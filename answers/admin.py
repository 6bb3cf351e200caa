"""Admin: review stored answers (read-only but for the review), manage documents and tokens.

Everything a model or a document wrote goes through ``format_html``/autoescape. What a
reviewer may read follows the app's one access rule (docs/access.md): every list,
search, filter and change page starts from a selector's queryset for that reviewer.
"""

from __future__ import annotations

import csv
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import BadRequest, PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import smart_split

from . import presenters, selectors, services
from .conf import answers_settings
from .gaps import REASON_LABELS, gap_groups, gap_rows
from .models import Answer, ApiToken, Document, Feedback
from .selectors import MAX_ID
from .support import SUPPORTED

GAP_DAYS, MAX_GAP_DAYS = 30, 366  # the content-gap report's default and longest period


# More words than anyone types into a search box; SQLite cannot nest a thousand (each is
# an AND of its own), and every one is a scan of the searched columns.
SEARCH_WORDS_MAX = 64
# Lookups no screen of the admin makes, whose pattern the database compiles and runs on
# every row: a malformed one is a database error, a backtracking one stalls a worker.
REFUSED_LOOKUPS = frozenset({"regex", "iregex"})
BAD_LIST_MESSAGE = "This list cannot be filtered or searched that way ({}); here it is in full."


class BadListQuery(IncorrectLookupParameters, BadRequest):
    """A filter or search the admin cannot run. The changelist catches it as
    ``IncorrectLookupParameters`` (its "?e=1" redirect); any other view that searches the
    same querysets (the autocomplete) answers 400, as Django does for ``BadRequest``."""


class CheckedChangeList(ChangeList):
    """A changelist whose bad filter values get the admin's "?e=1" page, never a 500:
    Django's date hierarchy computes the end of a year, month or day it was given without
    a range check (``created_at__year=9999``: ValueError; a huge year: OverflowError),
    PostgreSQL refuses a NUL in a text value (``?status__exact=%00``: DataError), SQLite
    cannot bind an integer past 64 bits (``?question=99…9``: OverflowError, when the count
    runs), and a regex lookup runs a pattern in the database."""

    def get_filters(self, request: HttpRequest) -> Any:
        if any("\x00" in value for _, values in request.GET.lists() for value in values):
            raise BadListQuery("a value holds a NUL character")
        if any(key.rsplit("__", 1)[-1] in REFUSED_LOOKUPS for key in request.GET):
            raise BadListQuery("a pattern lookup")
        try:
            return super().get_filters(request)
        except (ValueError, OverflowError) as exc:
            raise IncorrectLookupParameters(exc) from exc

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        queryset = super().get_queryset(request, exclude_parameters)
        # Long texts no column shows (a body can be megabytes), unread for a page of 100.
        deferred = getattr(self.model_admin, "list_defer", ())
        return queryset.defer(*deferred) if deferred else queryset

    def get_results(self, request: HttpRequest) -> None:
        try:
            super().get_results(request)
        except OverflowError as exc:  # raised binding the value, before the database runs
            raise BadListQuery("a number out of range") from exc


def _is_id(value: object) -> bool:
    """An id as our tables hold them (positive, 64-bit): anything else in a selection or a
    choice was typed or tampered with, and Django takes it to the database (ValueError for
    "abc"; SQLite cannot bind past 64 bits: OverflowError)."""
    text = str(value)
    return text.isascii() and text.isdigit() and len(text) <= 19 and 0 < int(text) <= MAX_ID


class IdsChoiceField(forms.ModelMultipleChoiceField):
    """A many-to-many choice whose values that are no id get the field's own error."""

    def clean(self, value: Any) -> Any:
        for pk in value if isinstance(value, (list, tuple)) else ():
            if not _is_id(pk):
                raise forms.ValidationError(
                    self.error_messages["invalid_pk_value"],
                    code="invalid_pk_value",
                    params={"pk": pk},
                )
        return super().clean(value)


class CheckedChangeListMixin:
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return CheckedChangeList

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        if not all(_is_id(value) for value in selected):
            # None: the admin redirects back to the list, which shows this.
            messages.error(request, "The selection holds a value that is not an id: nothing done.")
            return None
        return super().response_action(request, queryset, *args, **kwargs)  # type: ignore[misc]

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            return super().get_changelist_instance(request)  # type: ignore[misc]
        except IncorrectLookupParameters as exc:
            # The admin redirects to the whole list ("?e=1") and says nothing: say why.
            reason = str(exc) if isinstance(exc, BadListQuery) else "a value it cannot use"
            messages.error(request, BAD_LIST_MESSAGE.format(reason))
            raise

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        # The changelist's filters checked its "q" already; the autocomplete's "term" not.
        if "\x00" in search_term:
            raise BadListQuery("a value holds a NUL character")
        if len(list(smart_split(search_term))) > SEARCH_WORDS_MAX:
            raise BadListQuery(f"a search of more than {SEARCH_WORDS_MAX} words")
        return super().get_search_results(request, queryset, search_term)  # type: ignore[misc]


class FeedbackInline(admin.TabularInline):
    model = Feedback
    extra = 0
    can_delete = False
    fields = ("user", "rating", "comment", "created_at")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Feedback]:
        # Each row shows its user: read with it, not one query per row.
        return super().get_queryset(request).select_related("user")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SupportFilter(admin.SimpleListFilter):
    """By the weakest citation's support (ADR 0023); sort the column for weakest first."""

    title = "citation support"
    parameter_name = "support"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("weak", f"Weak (a citation under {SUPPORTED:.0%})"),
            ("strong", f"Every citation at {SUPPORTED:.0%} or more"),
            ("none", "Cites nothing"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Answer]) -> QuerySet[Answer]:
        if self.value() == "weak":
            return queryset.filter(support_min__lt=SUPPORTED)
        if self.value() == "strong":
            return queryset.filter(support_min__gte=SUPPORTED)
        if self.value() == "none":
            return queryset.filter(support_min__isnull=True)
        return queryset


class ProviderFilter(admin.SimpleListFilter):
    """By provider; its choices found from an index (Django's own filter on the field read
    every answer's provider for them, on each view of the list)."""

    title = "provider"
    parameter_name = "provider"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        providers = selectors.answer_providers_for_review(reviewer=request.user)
        return [(provider, provider or "(none)") for provider in providers]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Answer]) -> QuerySet[Answer]:
        value = self.value()
        return queryset if value is None else queryset.filter(provider=value)


@admin.register(Answer)
class AnswerAdmin(CheckedChangeListMixin, admin.ModelAdmin):
    list_display = (
        "question_text",
        "asked_by",
        "status",
        "reason",
        "retrieved",
        "cited",
        "support",
        "feedback_summary",
        "retrieval_ms",
        "first_token_ms",
        "total_ms",
        "reviewed",
        "created_at",
    )
    list_filter = (
        "status",
        SupportFilter,
        "reviewed",
        "citations_fallback",
        ProviderFilter,
        "created_at",
    )
    search_fields = ("question__text", "question__user__username", "final_text")
    date_hierarchy = "created_at"
    list_select_related = ("question", "question__user")
    # One count of the list, not two: the unfiltered total was counted again on every
    # view (for a reviewer without review_all_answers, each answer's withheld test again).
    show_full_result_count = False
    list_defer = ("raw_text", "final_text", "review_note")
    inlines = [FeedbackInline]

    class Media:
        css = {"all": ["answers/admin.css"]}  # no inline styles: the CSP forbids them

    fieldsets = (
        ("Question", {"fields": ("question_text", "asked_by", "conversation", "turn")}),
        ("Outcome", {"fields": ("status", "error", "citations_fallback", "provider", "model")}),
        ("Text", {"fields": ("texts_side_by_side",)}),
        ("Citation support", {"fields": ("support_mean", "support_table")}),
        (
            "Retrieved sources",
            {"fields": ("sources_now", "searched_for", "rewrite", "rerank", "sources_table")},
        ),
        ("Timings (ms)", {"fields": ("retrieval_ms", "first_token_ms", "total_ms")}),
        ("Review", {"fields": ("reviewed", "review_note", "reviewed_by", "reviewed_at")}),
    )
    readonly_fields = (
        "question_text",
        "asked_by",
        "conversation",
        "turn",
        "status",
        "error",
        "citations_fallback",
        "provider",
        "model",
        "texts_side_by_side",
        "support_mean",
        "support_table",
        "sources_now",
        "searched_for",
        "rewrite",
        "rerank",
        "sources_table",
        "retrieval_ms",
        "first_token_ms",
        "total_ms",
        "reviewed_by",
        "reviewed_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Answer]:
        # Withheld answers are not in the list, the search, the filters' counts, the change
        # page (it says "does not exist", as for a missing id) or their feedback inline.
        return selectors.answer_admin_queryset(reviewer=request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def save_model(self, request: HttpRequest, obj: Answer, form: Any, change: bool) -> None:
        services.answer_mark_reviewed(
            answer=obj,
            reviewer=request.user,  # type: ignore[arg-type]
            reviewed=bool(form.cleaned_data.get("reviewed")),
            note=form.cleaned_data.get("review_note", ""),
        )

    @admin.display(description="Question", ordering="question__text")
    def question_text(self, obj: Answer) -> str:
        text = obj.question.text
        return text if len(text) <= 90 else text[:89] + "…"

    @admin.display(description="User", ordering="question__user__username")
    def asked_by(self, obj: Answer) -> str:
        return obj.question.user.get_username()

    @admin.display(description="Conversation")
    def conversation(self, obj: Answer) -> str:
        return str(obj.question.conversation_id)

    @admin.display(description="Turn")
    def turn(self, obj: Answer) -> int:
        reviewer = getattr(obj, "admin_reviewer", None) or AnonymousUser()
        return selectors.question_turn_for_review(question=obj.question, reviewer=reviewer)

    @admin.display(description="Reason", ordering="error")
    def reason(self, obj: Answer) -> str:
        return obj.error[:80]

    @admin.display(description="Retrieved", ordering="retrieved_count")
    def retrieved(self, obj: Answer) -> int:
        return getattr(obj, "retrieved_count", 0)

    @admin.display(description="Cited", ordering="cited_count")
    def cited(self, obj: Answer) -> int:
        return getattr(obj, "cited_count", 0)

    @admin.display(description="Feedback")
    def feedback_summary(self, obj: Answer) -> str:
        up, down = getattr(obj, "feedback_up", 0), getattr(obj, "feedback_down", 0)
        return f"+{up} / -{down}" if up or down else "—"

    @admin.display(description="Raw (as generated) | Final (citations finalized)")
    def texts_side_by_side(self, obj: Answer) -> SafeString:
        return format_html(
            '<div class="answers-side-by-side">'
            '<pre data-text="raw">{}</pre>'
            '<pre data-text="final">{}</pre></div>',
            obj.raw_text,
            obj.final_text,
        )

    @admin.display(description="Support (weakest)", ordering="support_min")
    def support(self, obj: Answer) -> str:
        return "—" if obj.support_min is None else f"{obj.support_min:.2f}"

    @admin.display(description="Each cited claim beside its passage")
    def support_table(self, obj: Answer) -> SafeString:
        reviewer = getattr(obj, "admin_reviewer", None) or AnonymousUser()
        passages: dict[int, list[str]] = {}
        for row in selectors.retrieved_sources_for_review(
            question_id=obj.question_id, reviewer=reviewer
        ):
            if row.final_number is not None:
                passages.setdefault(row.final_number, []).append(presenters.passage_text(row))
        citations = selectors.answer_citations(answer=obj)
        if not citations:
            return format_html("<p>{}</p>", "The answer cites nothing.")
        body = format_html_join(
            "",
            "<tr class='{}'><td>{}</td><td>[{}]</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    "unsupported" if c.support < SUPPORTED else "supported",
                    c.claim,
                    c.number,
                    f"{c.support:.2f}",
                    " … ".join(passages.get(c.number, ["(a source you may not view)"])),
                )
                for c in citations
            ),
        )
        return format_html(
            "<table class='answers-support'><thead><tr><th>Claim</th><th>Cites</th>"
            "<th>Support</th><th>Passage</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )

    @admin.display(description="Final sources, against the documents now")
    def sources_now(self, obj: Answer) -> SafeString:
        reviewer = getattr(obj, "admin_reviewer", None) or AnonymousUser()
        references = presenters.answer_references_for_review(answer=obj, reviewer=reviewer)
        if not references:
            return format_html("{}", "—")
        labels = {
            "current": "current",
            "changed": "changed since this answer (the passage shown is as it was)",
            "removed": "removed since this answer",
        }
        return format_html(
            "<ol class='answers-sources-now'>{}</ol>",
            format_html_join(
                "",
                "<li value='{}' data-source-status='{}'>{}: {}</li>",
                (
                    (
                        ref.index,
                        ref.source_status if ref.available else "unavailable",
                        ref.title,
                        labels[ref.source_status] if ref.available else "you may not view it",
                    )
                    for ref in references
                ),
            ),
        )

    @admin.display(description="Searched for")
    def searched_for(self, obj: Answer) -> str:
        question = obj.question
        if question.search_text:
            return f"{question.search_text} (the follow-up rewritten to stand alone)"
        if selectors.question_has_history(question=question):
            return "the question together with the one before it"
        return "the question as asked"

    @admin.display(description="Follow-up rewrite")
    def rewrite(self, obj: Answer) -> str:
        question = obj.question
        if question.rewrite_ms is None:
            return "—"  # off, first turn, or a provider that cannot rewrite
        outcome = f"not used: {question.rewrite_error}" if question.rewrite_error else "used"
        return f"{outcome} ({question.rewrite_ms} ms)"

    @admin.display(description="Reranker")
    def rerank(self, obj: Answer) -> str:
        if obj.question.rerank_error:
            return f"failed, search order kept: {obj.question.rerank_error}"
        return "—"

    @admin.display(description="Every candidate with its fate")
    def sources_table(self, obj: Answer) -> SafeString:
        reviewer = getattr(obj, "admin_reviewer", None) or AnonymousUser()
        rows = selectors.retrieved_sources_for_review(
            question_id=obj.question_id, reviewer=reviewer
        )
        # Ranks are positions in this list: a gap would tell where a hidden one was.
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    position,
                    self._document_cell(row),
                    row.chunk.ordinal if row.chunk else "—",
                    f"{row.score:.3f}",
                    "—" if row.rerank_score is None else f"{row.rerank_score:.3f}",
                    row.prompt_number or "—",
                    row.get_dropped_reason_display() or "numbered",
                    row.final_number or "—",
                )
                for position, row in enumerate(rows, start=1)
            ),
        )
        return format_html(
            "<table><thead><tr><th>Rank</th><th>Document</th><th>Chunk</th><th>Score</th>"
            "<th>Rerank</th><th>Prompt [n]</th><th>Fate</th><th>Final [n]</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            body,
        )

    @staticmethod
    def _document_cell(row: Any) -> SafeString:
        if row.document is None:  # deleted since (ADR 0022): the title as it was
            return format_html("{} <em>(removed)</em>", row.document_title or "a document")
        return format_html(
            "<a href='{}'>{}</a>",
            reverse("admin:answers_document_change", args=[row.document_id]),
            row.document.title,
        )

    def get_urls(self) -> list[Any]:
        gaps = path(
            "content-gaps/",
            self.admin_site.admin_view(self.content_gaps_view),
            name="answers_content_gaps",
        )
        return [gaps, *super().get_urls()]

    def content_gaps_view(self, request: HttpRequest) -> HttpResponse:
        """What the corpus lacks (ADR 0024): the reviewer's gap questions, grouped."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            days = min(max(int(request.GET.get("days", GAP_DAYS)), 1), MAX_GAP_DAYS)
        except ValueError:
            days = GAP_DAYS
        questions = selectors.gap_questions_for_review(
            reviewer=request.user, since=timezone.now() - timedelta(days=days)
        )
        groups = gap_groups(questions)
        if request.GET.get("format") == "csv":
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="content-gaps-{days}d.csv"'
            csv.writer(response).writerows(gap_rows(groups))
            return response
        context = {
            **self.admin_site.each_context(request),
            "title": "Content gaps",
            "days": days,
            "max_days": MAX_GAP_DAYS,
            "total": len(questions),
            "groups": [
                {
                    "label": group.label,
                    "count": len(group.questions),
                    "reasons": [
                        (REASON_LABELS[reason], count)
                        for reason, count in sorted(group.reasons.items())
                    ],
                    "weeks": sorted(group.weeks().items()),
                    "examples": group.examples(),
                    "nearest": group.nearest(),
                }
                for group in groups
            ],
        }
        return TemplateResponse(request, "admin/answers/content_gaps.html", context)

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        answer = super().get_object(request, object_id, from_field)
        if answer is not None:
            # Read-only fields render without the request: the object carries its viewer
            # (on this request's instance, never on the shared ModelAdmin).
            answer.admin_reviewer = request.user
        return answer


class DocumentForm(forms.ModelForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        body = self.fields.get("body")
        if isinstance(body, forms.CharField):
            # As stored: stripping cut every ingested body's last newline, so saving an
            # unchanged document (to restrict or rename it) changed its hash and replaced
            # its chunks, unlinking them from the answers' retrieval records.
            body.strip = False

    def clean_body(self) -> str:
        # Browsers send a textarea back with CRLF line endings (HTML's form encoding);
        # bodies are stored with LF, as ingestion normalizes them.
        body: str = self.cleaned_data["body"]
        if not body.strip():
            raise forms.ValidationError(forms.Field.default_error_messages["required"])
        return body.replace("\r\n", "\n").replace("\r", "\n")

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if "access" in cleaned and "groups" in cleaned:
            try:
                services.document_check_access(access=cleaned["access"], groups=cleaned["groups"])
            except services.DocumentAccessInvalid as exc:
                self.add_error("groups", str(exc))
        return cleaned


@admin.register(Document)
class DocumentAdmin(CheckedChangeListMixin, admin.ModelAdmin):
    form = DocumentForm
    list_display = ("title", "access", "chunk_count", "source_key", "updated_at")
    list_filter = ("access", "groups")
    search_fields = ("title", "source_key", "url")
    list_defer = ("body", "near_signature")
    filter_horizontal = ("groups",)
    readonly_fields = ("content_hash", "chunk_count", "created_at", "updated_at")
    fields = (
        "title",
        "url",
        "source_key",
        "access",
        "groups",
        "body",
        "content_hash",
        "chunk_count",
        "created_at",
        "updated_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        # Outside a document's groups (and without review_all_answers) a reviewer cannot
        # list, search, open or change it.
        return selectors.document_admin_queryset(reviewer=request.user)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("form_class", IdsChoiceField)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "url":
            kwargs["assume_scheme"] = "https"  # a bare "example.com/doc" means https
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="Chunks", ordering="chunk_count")
    def chunk_count(self, obj: Document) -> int:
        # Stored with the chunks (services), not counted: the list counted every chunk of
        # the corpus, grouped per document, on each view.
        return obj.chunk_count or 0

    def view_on_site(self, obj: Document) -> str:
        # The change form's link to the document's page. Not ``get_absolute_url`` on the
        # model: with one, the admin's shortcut (/admin/r/<type>/<id>/) redirects for every
        # existing id, whatever the reviewer may read, and so tells which ids exist.
        return reverse("answers:document", kwargs={"document_id": obj.pk})

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        # The groups with the access, through the service (not the form's save_m2m).
        services.document_save(
            document=obj,
            chunk_size=int(answers_settings.CHUNK_SIZE),
            groups=form.cleaned_data.get("groups"),
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        for formset in formsets:  # none today; the groups were saved by save_model
            self.save_formset(request, form, formset, change=change)


@admin.register(ApiToken)
class ApiTokenAdmin(CheckedChangeListMixin, admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "user__username", "prefix")
    actions = ["revoke_tokens"]
    list_select_related = ("user",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        # A token acts as its user: staff who are not superusers see and revoke their own.
        tokens = super().get_queryset(request)
        user = request.user
        return tokens if user.is_superuser else tokens.filter(user_id=user.pk)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user" and not request.user.is_superuser:
            # Only for themselves (services.api_token_check_creator): no other user to pick.
            kwargs["queryset"] = db_field.remote_field.model._default_manager.filter(
                pk=request.user.pk
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            services.api_token_rename(token=obj, name=obj.name)
            return
        token, raw = services.api_token_create(
            user=obj.user,
            name=obj.name,
            created_by=request.user,  # type: ignore[arg-type]
        )
        # The admin logs and links the object it was given: make it the stored one.
        obj.pk, obj.token_hash, obj.prefix, obj.created_at = (
            token.pk,
            token.token_hash,
            token.prefix,
            token.created_at,
        )
        self.message_user(
            request,
            format_html(
                "New token for {} (shown once, store it now): <code>{}</code>",
                token.user.get_username(),
                raw,
            ),
            messages.WARNING,
        )

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked, already = services.api_tokens_revoke(tokens=queryset)
        note = f"; {already} already revoked" if already else ""
        self.message_user(request, f"Revoked {revoked} token(s){note}.", messages.SUCCESS)
