from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from ..models import Answer
from ..presenters import excerpt_view, location_of
from ..rendering import render_passage_html, safe_url

register = template.Library()


@register.filter
def safe_href(url: str) -> str:
    """``url`` if it is http(s), mailto or on this site; otherwise an inert "#"."""
    return safe_url(url) or "#"


@register.filter
def passage_html(text: str) -> SafeString:
    """A document's Markdown as sanitized HTML (code highlighted; no marker is a citation)."""
    return mark_safe(render_passage_html(text))  # noqa: S308 (nh3 has sanitized it)


@register.filter
def excerpt_html(excerpt: str) -> SafeString:
    """A source's excerpt as sanitized HTML, as ``passage_html`` renders it (cached)."""
    return mark_safe(excerpt_view(excerpt).html)  # noqa: S308 (nh3 has sanitized it)


@register.filter
def status_label(status: str) -> str:
    """An answer's status in words ("No answer"), not its stored code ("no_answer")."""
    try:
        return str(Answer.Status(status).label)
    except ValueError:
        return status


@register.filter
def snippet(excerpt: str) -> str:
    return excerpt_view(excerpt).snippet


@register.filter
def location(url: str) -> str:
    return location_of(url)
