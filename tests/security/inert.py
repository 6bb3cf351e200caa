"""Assertions that a piece of HTML is inert: nothing in it can run script or load a resource.

What counts as a URL's scheme follows the WHATWG URL parser, the one browsers use: leading
and trailing C0 controls and spaces are stripped and tabs and newlines removed before the
scheme is read (so ``java\tscript:`` *is* ``javascript:``), and a scheme is letters first,
then letters, digits, ``+``, ``-`` or ``.``, up to the first ``:``.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

SAFE_SCHEMES = {"http", "https", "mailto"}
# Elements that run script, load a resource, embed a document, or restyle the page.
FORBIDDEN_TAGS = {
    "script", "iframe", "frame", "frameset", "svg", "math", "object", "embed", "applet",
    "img", "picture", "video", "audio", "source", "track", "style", "link", "meta", "base",
    "form", "input", "button", "textarea", "select", "noscript", "template", "details",
    "html", "head", "body", "marquee",
}  # fmt: skip
# Attributes whose value a browser resolves as a URL.
URL_ATTRIBUTES = {
    "href", "src", "srcset", "action", "formaction", "data", "background", "poster",
    "cite", "longdesc", "xlink:href", "ping", "lowsrc", "dynsrc",
}  # fmt: skip
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))
# A start tag and its attributes, as an HTML tokenizer reads them (quoted values may hold
# anything but their own quote, so "onerror=" inside a title is not an attribute).
_VALUE = r"""(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
_ATTRIBUTE = re.compile(rf"""\s*([^\s"'>/=]+){_VALUE}""")
_START_TAG = re.compile(rf"""<[A-Za-z][^\s/>]*((?:\s*/?\s*[^\s"'>/=]+{_VALUE})*)\s*/?>""")
_SAFE_STYLE = re.compile(r"(\s*text-align\s*:\s*(left|right|center)\s*;?)*\s*")


def event_handler_attributes(html: str) -> list[str]:
    """``on*`` attribute names in any start tag of ``html``, found without an HTML parser."""
    found = []
    for tag in _START_TAG.finditer(html):
        for name in _ATTRIBUTE.findall(tag.group(1)):
            if name.lower().startswith("on"):
                found.append(name)
    return found


def url_as_browser_reads_it(url: str) -> str:
    return re.sub(r"[\t\n\r]", "", url.strip(_C0_AND_SPACE))


def url_scheme(url: str) -> str | None:
    match = _SCHEME.match(url_as_browser_reads_it(url))
    return match.group(1).lower() if match else None


def assert_safe_url(url: str) -> None:
    """http(s), mailto, a fragment, a site path, or a scheme-less relative reference.

    The last (for example ``java%09script:x``, where ``%`` cannot be part of a scheme)
    resolves against the page's own origin, so it cannot run script either.
    """
    seen = url_as_browser_reads_it(url)
    if seen.startswith("#"):
        return
    if seen.startswith("/"):
        # "//host" and "/\\host" (a browser reads "\\" as "/") are another site.
        assert not seen.startswith(("//", "/\\")), f"off-site URL {url!r} passes for a path"
        return
    scheme = url_scheme(seen)
    assert scheme is None or scheme in SAFE_SCHEMES, f"dangerous URL {url!r} (scheme {scheme!r})"


# The Sources panel's own markup (answers/sources.html): each card's passage folds away in
# a <details>. Nothing a document or a model wrote can produce one (the sanitizer's
# allow-list has no <details>); a panel holds exactly one per shown passage.
PANEL_TAGS = frozenset({"details"})


def assert_inert(html: str, *, own_tags: frozenset[str] = frozenset()) -> BeautifulSoup:
    """No forbidden element, no event handler, no style beyond text-align, only safe URLs.

    ``own_tags`` are elements the template itself writes (``PANEL_TAGS``)."""
    assert not event_handler_attributes(html), html
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.find_all(True):
        if tag.name.lower() in own_tags:
            assert set(tag.attrs) <= {"class", "open"}, tag.attrs
            continue
        assert tag.name.lower() not in FORBIDDEN_TAGS, f"<{tag.name}> in {html!r}"
        for name, value in tag.attrs.items():
            lowered = name.lower()
            values = value if isinstance(value, list) else [value]
            assert not lowered.startswith("on"), f"{name}= on <{tag.name}> in {html!r}"
            if lowered == "style":
                assert all(_SAFE_STYLE.fullmatch(v) for v in values), f"style {value!r}"
            if lowered in URL_ATTRIBUTES or lowered.endswith(":href"):
                for v in values:
                    assert_safe_url(v)
    return soup


def assert_page_has_no_injected_script(html: str) -> None:
    """For whole pages (which carry their own script files): nothing a document injected."""
    assert "<script>alert" not in html
    # An attribute, not text: a passage may show '"><a href="javascript:…">' as words (a
    # text node, which the sanitizer serializes with its quotes as they were).
    soup = BeautifulSoup(html, "html.parser")
    assert not soup.find(href=re.compile(r"^\s*javascript:", re.I))
    for script in soup.find_all("script"):
        assert "alert" not in script.get_text(), script
    for tag in soup.find_all(True):
        for name, value in tag.attrs.items():
            assert not name.lower().startswith("on"), f"{name}= on <{tag.name}>"
            if name.lower() in URL_ATTRIBUTES:
                for v in value if isinstance(value, list) else [value]:
                    assert_safe_url(v)
