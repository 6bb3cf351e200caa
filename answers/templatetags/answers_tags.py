from __future__ import annotations

from urllib.parse import urlsplit

from django import template

register = template.Library()

_SAFE_SCHEMES = {"http", "https", "mailto"}


@register.filter
def safe_href(url: str) -> str:
    """``url`` if it is http(s), mailto or site-relative; otherwise an inert "#"."""
    value = (url or "").strip()
    if not value:
        return "#"
    parts = urlsplit(value)
    if parts.scheme:
        return value if parts.scheme.lower() in _SAFE_SCHEMES else "#"
    # Scheme-relative "//host" leaves the site; "/path" and "#frag" do not.
    return value if value.startswith(("/", "#")) and not value.startswith("//") else "#"
