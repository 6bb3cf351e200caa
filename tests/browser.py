"""What every browser test shares: Debian's chromium driven by Playwright (sync API).

The app runs under daphne (tests/live.py); the page talks to it over the WebSocket.
Never run ``playwright install``: ``chromium_executable`` (conftest) provides the browser.
The fixtures (``browser``, ``page``, ``slow_page``) are in tests/conftest.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Locator, Page, expect

from tests import helpers

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000
# The context's default timeout covers actions and waits, not `expect`, whose own default
# (5 s) an answer streaming on a loaded CI machine can outlast.
expect.set_options(timeout=TIMEOUT_MS)
QUESTION = "What is a lambda expression?"

# Records, per turn, the first text streamed into an answer while it is still streaming.
WATCH_STREAMING = """
() => {
  window.__streamedWhileStreaming = [];
  const turns = document.querySelector("[data-turns]");
  new MutationObserver(() => {
    turns.querySelectorAll("[data-turn]").forEach((turn, index) => {
      const answer = turn.querySelector("[data-answer]");
      const text = answer.textContent.trim();
      if (answer.dataset.answerState === "streaming" && text
          && window.__streamedWhileStreaming[index] === undefined) {
        window.__streamedWhileStreaming[index] = text;
      }
    });
  }).observe(turns, {childList: true, subtree: true, characterData: true});
}
"""


class PageErrors:
    def __init__(self, page: Page) -> None:
        self.messages: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.messages.append(f"pageerror: {error}"))

    def _console(self, message) -> None:  # type: ignore[no-untyped-def]
        if message.type == "error":
            self.messages.append(f"console.error: {message.text} ({message.location})")


def new_page(browser: Browser, base_url: str, *, init_script: str = "", **options: Any) -> Page:
    """A page in a context of its own (``options``: viewport, color_scheme, ...), with its
    console errors collected in ``page.errors``; close it with ``page.context.close()``."""
    context = browser.new_context(base_url=base_url, **options)
    context.set_default_timeout(TIMEOUT_MS)
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.errors = PageErrors(page)  # type: ignore[attr-defined]
    return page


def log_in(page: Page, username: str, password: str, *, admin: bool = False) -> None:
    """Through the site's login page, or the admin's (whose labels end with a colon)."""
    page.goto("/admin/login/" if admin else "/accounts/login/")
    colon = ":" if admin else ""
    page.get_by_label("Username" + colon).fill(username)
    page.get_by_label("Password" + colon).fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/admin/$" if admin else r"/$"))
    if not admin:
        # The ask page's script has bound its handlers (clicking earlier would submit the
        # form natively, and a watcher installed earlier would go with the old document).
        expect(page.locator("[data-ask][data-ready]")).to_have_count(1)


def log_out_elsewhere(page: Page) -> None:
    """End the page's session as another tab of the same browser would (same cookies),
    without opening one: a second page left the first in the background, and closing it
    waits without a time limit."""
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        "/accounts/logout/", headers={"X-CSRFToken": token}, max_redirects=0
    )
    assert response.status == 302, response.status


def ask(page: Page, question: str) -> Locator:
    """Ask ``question``; return its turn once its answer is done."""
    turns = page.locator("[data-turns] [data-turn]")
    before = turns.count()
    page.get_by_label("Your question").fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(turns).to_have_count(before + 1)
    turn = turns.nth(before)
    expect(turn.locator(".turn-question")).to_have_text(question)
    answer = turn.locator("[data-answer]")
    expect(answer).to_have_attribute("data-answer-state", re.compile("streaming|done"))
    # Some token text showed up while the answer was still streaming.
    page.wait_for_function(
        "index => window.__streamedWhileStreaming[index] !== undefined", arg=before
    )
    expect(answer).to_have_attribute("data-answer-state", "done")
    return turn


def check_citations(turn: Locator) -> list[str]:
    """Every citation links to an entry of this turn's final Sources panel; return the ids."""
    panels = turn.locator("[data-sources-panel]")
    expect(panels).to_have_count(1)
    expect(panels).to_have_attribute("data-state", "final")
    citations = turn.locator("[data-answer] a.citation")
    assert citations.count() >= 1, turn.inner_html()
    ids = []
    for href in citations.evaluate_all("links => links.map(a => a.getAttribute('href'))"):
        assert href and href.startswith("#"), href
        target = href[1:]
        expect(panels.locator(f"[id='{target}']")).to_have_count(1)
        ids.append(target)
    return ids


# Keeps every socket the page opens, so a test can drop one as a network would; while
# ``window.__serverDown`` is set, new ones are refused as an unreachable server's would be
# (``server_down``).
RECORD_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.__serverDown = false;
  function Recorded(url, protocols) {
    if (window.__serverDown) url = url.replace("/ws/answers/", "/ws/unreachable/");
    const socket = protocols === undefined ? new Native(url) : new Native(url, protocols);
    window.__sockets.push(socket);
    return socket;
  }
  Recorded.prototype = Native.prototype;
  for (const name of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Recorded[name] = Native[name];
  window.WebSocket = Recorded;
})();
"""


def server_down(page: Page) -> None:
    """The connection drops and every reconnection is refused until ``server_up``."""
    page.evaluate("window.__serverDown = true; window.__sockets.forEach(s => s.close())")


def server_up(page: Page) -> None:
    page.evaluate("window.__serverDown = false")


def unexpected_errors(page: Page) -> list[str]:
    """The page's console errors, less the browser's own report of a refused socket."""
    messages = page.errors.messages  # type: ignore[attr-defined]
    return [m for m in messages if "/ws/unreachable/' failed" not in m]


def start_asking(page: Page, question: str) -> Locator:
    """Ask, and return the turn once some of its answer has streamed in."""
    page.evaluate(WATCH_STREAMING)
    page.get_by_label("Your question").fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()
    page.wait_for_function("() => window.__streamedWhileStreaming[0] !== undefined")
    turn = page.locator("[data-turns] [data-turn]").first
    expect(turn).to_have_attribute("data-answer-id", re.compile(r"^\d+$"))
    return turn


# A folder to save the README's screenshots in (docs/img); unset in CI: nothing is written.
SCREENSHOTS = os.environ.get("ANSWERS_SCREENSHOTS", "")


def screenshot(target: Page | Locator, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(Path(SCREENSHOTS) / name))


def ask_off_loop(**kwargs):  # type: ignore[no-untyped-def]
    """``helpers.ask`` from a thread of its own: Playwright's loop holds this one."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    def run():  # type: ignore[no-untyped-def]
        try:
            return helpers.ask(**kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


# Viewports every page test runs at: a laptop, and a phone 390 px wide.
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}


def assert_accessible(page: Page, *, where: str) -> None:
    """axe-core (axe-playwright-python, bundled: nothing is downloaded) finds no serious or
    critical violation on the page as it is now."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    report = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:5]}"
        for v in bad
    ]
    assert not bad, f"{where}: " + "\n".join(report)


def assert_fits(page: Page) -> None:
    """Nothing makes the page scroll sideways (a phone's narrow screen included)."""
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page is {overflow}px wider than the screen"
