"""Answer Markdown to safe HTML, with citation markers linked to the Sources panel.

The parser is ``answers.citations.markdown_parser()``, the one definition of what a
marker is: its citation rule turns each marker into a ``citation`` token while parsing,
so the page links exactly the markers the citation rules read. Raw HTML is off; nh3
sanitizes the whole result last.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import urlsplit

import nh3
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from .citations import ENV_KEY, RenderCollector, markdown_parser

ALLOWED_TAGS = {
    "a", "p", "br", "hr", "em", "strong", "del", "code", "pre", "blockquote", "ul", "ol",
    "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
    "span", "sup",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class", "aria-label"},
    "code": {"class"},
    "span": {"class"},
    "ol": {"start"},
}
URL_SCHEMES = {"http", "https", "mailto"}


def _render_image_as_text(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # An image would load from wherever its URL points (a classic exfiltration channel),
    # so it is shown as its description instead.
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    return f'<span class="image-placeholder">[image: {escape(alt)}]</span>'


def _render_citation(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    count = env["answers.source_count"]
    prefix = env["answers.anchor_prefix"]
    numbers = [n for n in token.meta["numbers"] if 1 <= n <= count]
    if not numbers:
        return escape(token.content)  # not a source of this answer: shown as written
    links = ", ".join(
        f'<a class="citation" href="#{source_anchor(prefix, n)}" aria-label="Source {n}">{n}</a>'
        for n in numbers
    )
    return f'<span class="citation-group">[{links}]</span>'


def _make_markdown() -> MarkdownIt:
    md = markdown_parser()
    md.add_render_rule("image", _render_image_as_text)
    md.add_render_rule("citation", _render_citation)
    return md


_MARKDOWN = _make_markdown()


def safe_url(url: str) -> str | None:
    """``url`` if following it cannot run anything here (http(s), mailto, or a path or
    fragment on this site); otherwise None."""
    value = (url or "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme:
        return value if parts.scheme.lower() in URL_SCHEMES else None
    # "//host" leaves the site; "/path" and "#fragment" stay on it.
    return value if value.startswith(("/", "#")) and not value.startswith("//") else None


def source_anchor(anchor_prefix: str, number: int) -> str:
    """The id of a Sources panel entry; unique per answer so several turns never collide."""
    return f"{anchor_prefix}-{number}"


def sanitize_html(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )


def render_answer_html(text: str, *, anchor_prefix: str, source_count: int) -> str:
    """Safe HTML for an answer whose markers are already final (1..source_count)."""
    env = {
        ENV_KEY: RenderCollector(),
        "answers.source_count": source_count,
        "answers.anchor_prefix": anchor_prefix,
    }
    return sanitize_html(_MARKDOWN.render(text, env))
