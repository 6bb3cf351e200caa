from __future__ import annotations

from django import template

from ..rendering import safe_url

register = template.Library()


@register.filter
def safe_href(url: str) -> str:
    """``url`` if it is http(s), mailto or on this site; otherwise an inert "#"."""
    return safe_url(url) or "#"
