"""The ask page as staff use it (issue 16), in Debian's chromium at a laptop's width and a
phone's (390 px): cards, previews, copy, progress, keyboard, history, code, dark scheme and
an axe-core check of every page."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import (
    PHONE,
    QUESTION,
    RECORD_SOCKETS,
    VIEWPORTS,
    WATCH_STREAMING,
    ask,
    ask_off_loop,
    assert_accessible,
    assert_fits,
    check_citations,
    log_in,
    new_page,
    screenshot,
    start_asking,
)

pytestmark = pytest.mark.django_db(transaction=True)

# Records every progress phase the first turn went through, and whether the answer region
# was busy (not announced) while tokens arrived.
WATCH_PROGRESS = """
() => {
  window.__phases = [];
  window.__busyWhileStreaming = [];
  const turns = document.querySelector("[data-turns]");
  new MutationObserver(() => {
    const turn = turns.querySelector("[data-turn]");
    if (!turn) return;
    const phase = turn.dataset.phase;
    if (phase && window.__phases.at(-1) !== phase) window.__phases.push(phase);
    const answer = turn.querySelector("[data-answer]");
    if (answer.dataset.answerState === "streaming" && answer.textContent.trim()) {
      window.__busyWhileStreaming.push(answer.getAttribute("aria-busy"));
    }
  }).observe(turns, {childList: true, subtree: true, characterData: true, attributes: true});
}
"""


# Every behaviour at a laptop's width and a phone's: each test below takes one of these.
@pytest.fixture(params=sorted(VIEWPORTS))
def sized_page(request, browser: Browser, daphne_live_server):  # type: ignore[no-untyped-def]
    page = new_page(
        browser, daphne_live_server.url, viewport=VIEWPORTS[request.param],
        permissions=["clipboard-read", "clipboard-write"],
    )  # fmt: skip
    page.size = request.param  # type: ignore[attr-defined]
    yield page
    page.context.close()


@pytest.fixture(params=sorted(VIEWPORTS))
def sized_slow_page(request, browser: Browser, slow_live_server):  # type: ignore[no-untyped-def]
    """Like ``sized_page``, on the server whose answers take seconds."""
    page = new_page(
        browser, slow_live_server.url, viewport=VIEWPORTS[request.param],
        init_script=RECORD_SOCKETS,
    )  # fmt: skip
    page.size = request.param  # type: ignore[attr-defined]
    yield page
    page.context.close()


def test_an_answer_reads_well_and_its_citations_preview_their_sources(
    sized_page: Page, asker
) -> None:
    page = sized_page
    log_in(page, "asker", "pw-asker")
    page.evaluate(WATCH_STREAMING)
    page.evaluate(WATCH_PROGRESS)
    turn = ask(page, QUESTION)
    check_citations(turn)
    # Progress was shown, in order, and the live region stayed quiet while tokens came.
    assert page.evaluate("window.__phases") == ["searching", "writing"]
    assert set(page.evaluate("window.__busyWhileStreaming")) == {"true"}
    answer = turn.locator("[data-answer]")
    expect(answer).to_have_attribute("aria-live", "polite")
    expect(answer).to_have_attribute("aria-busy", "false")
    expect(turn.locator("[data-turn-progress]")).to_be_hidden()
    if page.size == "desktop":  # type: ignore[attr-defined]
        screenshot(page, "ask-done.png")

    # Icons are SVG, not emoji.
    helpful = turn.get_by_role("button", name="Helpful", exact=True)
    expect(helpful.locator("svg")).to_have_count(1)
    assert not re.search(r"[\U0001F300-\U0001FAFF]", turn.inner_text())

    # Compact cards: number, title, where, first words; the passage opens on demand.
    card = turn.locator("[data-sources-panel] li.source").first
    expect(card.locator(".source-number")).to_have_text("1")
    href = card.get_attribute("data-href")
    where = urlsplit(href).hostname or "In the corpus"
    expect(card.locator(".source-where")).to_contain_text(where)
    passage = card.locator("details.source-passage")
    expect(passage.locator(".excerpt")).to_be_hidden()
    card.get_by_text("Show passage").click()
    expect(passage.locator(".excerpt")).to_be_visible()

    # A citation previews its source on hover and on keyboard focus; Escape closes it.
    title = card.locator(".source-title").inner_text()
    preview = page.locator("[data-citation-preview]")
    citation = turn.locator("[data-answer] a.citation").first
    citation.hover()
    expect(preview).to_be_visible()
    expect(preview).to_contain_text(title)
    expect(citation).to_have_attribute("aria-describedby", "citation-preview")
    screenshot(page, f"citation-preview-{page.size}.png")  # type: ignore[attr-defined]
    page.keyboard.press("Escape")
    expect(preview).to_be_hidden()
    page.get_by_label("Your question").focus()
    citation.focus()
    expect(preview).to_be_visible()
    # Following it goes to the card (its passage opened).
    citation.click()
    expect(page).to_have_url(re.compile("#" + re.escape(citation.get_attribute("href")[1:])))
    expect(preview).to_be_hidden()

    # Copy: the answer's Markdown with its numbered sources under it.
    turn.get_by_role("button", name="Copy").click()
    expect(turn.locator("[data-copy-status]")).to_have_text("Copied, with its sources.")
    copied = page.evaluate("navigator.clipboard.readText()")
    markdown = turn.locator("[data-answer-markdown]").evaluate("t => t.content.textContent")
    assert copied.startswith(markdown.strip()) and "[1]" in markdown
    sources = copied.split("\n\nSources:\n", 1)[1].splitlines()
    assert sources[0] == f"[1] {title} <{urljoin(page.url, href)}>"
    assert len(sources) == turn.locator("[data-sources-panel] li.source").count()

    assert_fits(page)
    assert_accessible(page, where="the ask page with an answer")
    assert page.errors.messages == []  # type: ignore[attr-defined]


def test_the_keyboard_asks_and_comes_back_to_the_question(sized_page: Page, asker) -> None:
    page = sized_page
    log_in(page, "asker", "pw-asker")
    box = page.get_by_label("Your question")
    box.fill("What is a lambda")
    box.press("Shift+Enter")  # a new line, not a question
    box.type("expression?")
    expect(box).to_have_value("What is a lambda\nexpression?")
    expect(page.locator("[data-turns] [data-turn]")).to_have_count(0)
    box.press("Control+Enter")
    turn = page.locator("[data-turns] [data-turn]")
    expect(turn).to_have_count(1)
    expect(turn.locator("[data-answer]")).to_have_attribute("data-answer-state", "done")
    expect(box).to_be_focused()  # ready for the follow-up
    turn.locator(".source-title").first.focus()
    page.keyboard.press("/")
    expect(box).to_be_focused()
    expect(box).to_have_value("")  # the "/" was not typed
    assert_fits(page)
    assert page.errors.messages == []  # type: ignore[attr-defined]


def test_enter_that_ends_an_input_method_composition_does_not_ask(page: Page, asker) -> None:
    # Typing Japanese or Chinese, Enter picks the characters composed so far; only the
    # next Enter asks.
    log_in(page, "asker", "pw-asker")
    box = page.get_by_label("Your question")
    box.fill("ラムダ式とは")
    box.evaluate(
        "box => box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', keyCode: 229,"
        " isComposing: true, bubbles: true, cancelable: true}))"
    )
    expect(box).to_have_value("ラムダ式とは")
    box.press("End")
    box.type("?")
    box.press("Enter")
    turns = page.locator("[data-turns] [data-turn]")
    expect(turns.locator("[data-answer]")).to_have_attribute("data-answer-state", "done")
    expect(turns).to_have_count(1)
    expect(turns.locator(".turn-question")).to_have_text("ラムダ式とは?")
    assert page.errors.messages == []  # type: ignore[attr-defined]


def test_a_stopped_answer_says_so_and_can_be_asked_again(sized_slow_page: Page, asker) -> None:
    from answers.models import Answer

    page = sized_slow_page
    log_in(page, "asker", "pw-asker")
    page.evaluate(WATCH_STREAMING)
    page.get_by_label("Your question").fill(QUESTION)
    page.get_by_role("button", name="Ask", exact=True).click()
    turn = page.locator("[data-turns] [data-turn]").first
    expect(turn.locator("[data-turn-progress]")).to_contain_text("Writing the answer")
    page.wait_for_function("() => window.__streamedWhileStreaming[0] !== undefined")
    if page.size == "desktop":  # type: ignore[attr-defined]
        screenshot(page, "ask-streaming.png")
    page.get_by_role("button", name="Stop").click()
    expect(turn.locator("[data-turn-outcome]")).to_have_text("Stopped before it finished.")
    again = turn.get_by_role("button", name="Ask again")
    expect(again).to_be_visible()
    again.click()
    turns = page.locator("[data-turns] [data-turn]")
    expect(turns).to_have_count(2)
    expect(turns.nth(1).locator(".turn-question")).to_have_text(QUESTION)
    expect(turns.nth(1).locator("[data-answer]")).to_have_attribute(
        "data-answer-state", "done", timeout=30_000
    )
    statuses = list(Answer.objects.order_by("pk").values_list("status", flat=True))
    assert statuses == ["interrupted", "complete"]
    assert_fits(page)
    assert page.errors.messages == []  # type: ignore[attr-defined]


def test_focus_stays_where_the_reader_is_when_the_sources_are_replaced(
    sized_slow_page: Page, asker
) -> None:
    slow_page = sized_slow_page
    log_in(slow_page, "asker", "pw-asker")
    turn = start_asking(slow_page, QUESTION)
    # Reading a retrieved source while the answer is written: when the panel is replaced
    # by the final one, focus goes to its heading, not to the page or the question box.
    turn.locator("[data-sources-panel] .source-title").first.focus()
    expect(turn.locator("[data-sources-panel]")).to_have_attribute(
        "data-state", "final", timeout=30_000
    )
    expect(turn.locator("[data-sources-panel] h3")).to_be_focused()
    assert slow_page.errors.messages == []  # type: ignore[attr-defined]


def test_the_history_lists_conversations_and_opening_one_continues_it(
    sized_page: Page, asker, other_asker
) -> None:
    from answers.models import Answer, Question

    page = sized_page
    first = ask_off_loop(user=asker, question=QUESTION)
    conversation = first.answer.conversation_id
    ask_off_loop(user=asker, question="and the global statement?", conversation_id=conversation)
    failed = ask_off_loop(user=asker, question="What does yield do?")
    Answer.objects.filter(pk=failed.answer.answer_id).update(status="failed", final_text="")
    ask_off_loop(user=other_asker, question="What does pass do?")

    log_in(page, "asker", "pw-asker")
    page.get_by_role("link", name="Your conversations").click()
    entries = page.locator(".conversation")
    expect(entries).to_have_count(2)  # mine only, latest first
    expect(entries.first).to_contain_text("What does yield do?")
    expect(entries.nth(1)).to_contain_text("2 questions")
    expect(entries.nth(1)).to_contain_text("Latest: and the global statement?")
    assert_fits(page)
    assert_accessible(page, where="the history")
    if page.size == "desktop":  # type: ignore[attr-defined]
        screenshot(page, "history.png")

    # A failed answer says so, and can be asked again in its conversation.
    entries.first.get_by_role("link").click()
    failed_turn = page.locator("[data-turns] [data-turn]")
    expect(failed_turn.locator("[data-turn-outcome]")).to_have_text("This answer failed.")
    failed_turn.get_by_role("button", name="Ask again").click()
    expect(page.locator("[data-turns] [data-turn]")).to_have_count(2)
    expect(
        page.locator("[data-turns] [data-turn]").nth(1).locator("[data-answer]")
    ).to_have_attribute("data-answer-state", "done")

    page.goto("/answers/")
    page.locator(".conversation").nth(1).get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/conversations/{conversation}/$"))
    turns = page.locator("[data-turns] [data-turn]")
    expect(turns).to_have_count(2)
    check_citations(turns.first)
    assert_accessible(page, where="a past conversation")
    page.evaluate(WATCH_STREAMING)
    page.get_by_label("Ask a follow-up").fill("and how does it differ from a def function?")
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(turns).to_have_count(3)
    expect(turns.nth(2).locator("[data-answer]")).to_have_attribute("data-answer-state", "done")
    # The same conversation, its third turn.
    asked = Question.objects.get(text="and how does it differ from a def function?")
    assert str(asked.conversation_id) == conversation and asked.turn == 3
    assert page.errors.messages == []  # type: ignore[attr-defined]


def test_code_is_highlighted_and_readable_in_light_and_dark(
    browser: Browser, daphne_live_server, asker, scripted
) -> None:
    scripted.script = [
        "A lambda makes a small function [1]:\n\n",
        "```python\nsquare = lambda x: x * x  # one expression\n```\n",
    ]
    done = ask_off_loop(user=asker, question=QUESTION)
    for scheme, background in (("light", "rgb(246, 247, 249)"), ("dark", "rgb(15, 17, 21)")):
        page = new_page(browser, daphne_live_server.url, color_scheme=scheme, viewport=PHONE)
        try:
            log_in(page, "asker", "pw-asker")
            page.goto(f"/answers/{done.answer.answer_id}/")
            code = page.locator("[data-answer] pre code.hl")
            expect(code).to_have_count(1)
            expect(code.locator("span.hl-k")).to_have_text("lambda")  # a keyword, coloured
            expect(code.locator("span.hl-c1")).to_contain_text("# one expression")
            assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background
            keyword = code.locator("span.hl-k").evaluate("e => getComputedStyle(e).color")
            plain = page.evaluate("getComputedStyle(document.body).color")
            assert keyword != plain
            assert_fits(page)
            assert_accessible(page, where=f"an answer with code, {scheme}")
            # The document page renders its passages the same way.
            page.goto(f"/documents/{done.answer.references[0].document_id}/")
            expect(page.locator(".chunk").first).to_be_visible()
            assert_accessible(page, where=f"a document page, {scheme}")
            assert page.errors.messages == []  # type: ignore[attr-defined]
        finally:
            page.context.close()


@pytest.mark.parametrize(("scheme", "size"), [("light", "desktop"), ("dark", "phone")])
def test_every_page_passes_an_accessibility_check(
    browser: Browser, daphne_live_server, asker, scheme, size
) -> None:
    done = ask_off_loop(user=asker, question=QUESTION)
    page = new_page(browser, daphne_live_server.url, color_scheme=scheme, viewport=VIEWPORTS[size])

    def check(where: str) -> None:
        assert_accessible(page, where=f"{where} ({scheme}, {size})")
        assert_fits(page)

    try:
        page.goto("/accounts/login/")
        check("the login page")
        log_in(page, "asker", "pw-asker")
        check("the empty ask page")
        page.goto("/answers/")
        check("the history")
        page.goto(f"/conversations/{done.answer.conversation_id}/")
        check("a conversation")
        page.goto(f"/answers/{done.answer.answer_id}/")
        page.locator("details.source-passage summary").first.click()
        check("an answer page, a passage open")
        page.goto(f"/documents/{done.answer.references[0].document_id}/")
        check("a document page")
        page.goto("/no-such-page/")
        check("the not-found page")
    finally:
        page.context.close()
