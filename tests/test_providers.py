from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from answers.citations import iter_markers
from answers.prompt import MARKER_BREAK, Prompt, PromptSource, neutralize_markers
from answers.providers.extractive import ExtractiveProvider
from answers.providers.openai import OpenAIProvider
from tests.llm_server import serving

pytestmark = pytest.mark.django_db

SOURCES = (
    PromptSource(
        1,
        1,
        "Generators",
        ("A generator function uses the yield statement to produce values lazily.",),
    ),
    PromptSource(
        2, 2, "Cooking", ("Unrelated text about the weather and nothing of interest here at all.",)
    ),
    PromptSource(
        3, 3, "Arrays", ("Indexing a list like a[1] returns the second item of the list object.",)
    ),
)


async def _stream(prompt: Prompt) -> list[str]:
    return [delta async for delta in ExtractiveProvider().stream(prompt)]


stream = async_to_sync(_stream)


def test_extractive_answers_cite_the_sources_they_quote_and_only_those():
    deltas = stream(Prompt(question="How does a generator yield values?", sources=SOURCES))
    text = "".join(deltas)
    assert len(deltas) > 1, "streamed in small deltas"
    cited = {n for m in iter_markers(text) for n in m.numbers}
    assert 1 in cited and 2 not in cited
    assert cited <= {1, 2, 3}
    assert "yield statement" in text


def test_quoted_brackets_are_escaped_so_they_are_not_citations():
    text = "".join(stream(Prompt(question="list indexing second item", sources=SOURCES)))
    # A backslash, which API clients read as Markdown; no invisible character left.
    assert "like a\\[1] returns" in text
    assert MARKER_BREAK not in text
    assert [m.numbers for m in iter_markers(text)] == [(3,)]


def test_it_is_deterministic():
    prompt = Prompt(question="How does a generator yield values?", sources=SOURCES)
    assert stream(prompt) == stream(prompt)


# A document whose text looks like citations in every form the citation rules accept.
FORGED = (
    "[2] If x is very close to zero, see [1, 3] and [1-3], or \uff3b2\uff3d, \u30102\u3011, "
    "[\u0662] (Arabic-Indic two) and [ 2 ] in this long enough sentence."
)
FORGING_SOURCES = (
    PromptSource(1, 1, "Floats [2]", (FORGED,)),
    PromptSource(2, 2, "Other", ("Something else entirely, said in a sentence of its own.",)),
)


def test_source_text_can_forge_no_marker_yet_reads_the_same():
    (source, _) = FORGING_SOURCES
    assert list(iter_markers(FORGED)), "the forms are real markers in an answer"
    assert not list(iter_markers(source.passages[0] + " " + source.title))
    assert source.passages[0].replace(MARKER_BREAK, "") == FORGED
    assert neutralize_markers("[2025] and [x]") == "[2025] and [x]"  # not markers: untouched


def test_the_extractive_provider_quoting_a_forged_marker_cites_only_its_own():
    # Nothing matches "capital of France": the provider quotes the first source's opening.
    for question in ("What is the capital of France?", "How close is x to zero?"):
        text = "".join(stream(Prompt(question=question, sources=FORGING_SOURCES)))
        assert "If x is very close" in text
        assert [m.numbers for m in iter_markers(text)] == [(1,)]


@pytest.fixture
def echo_llm(settings):  # type: ignore[no-untyped-def]
    with serving(settings, {"kind": "echo"}) as server:
        yield server


async def _openai_text(prompt: Prompt) -> str:
    return "".join([d async for d in OpenAIProvider().stream(prompt) if isinstance(d, str)])


def test_a_model_echoing_a_forged_marker_cites_only_its_own(echo_llm):
    text = async_to_sync(_openai_text)(Prompt(question="How close?", sources=FORGING_SOURCES))
    assert "If x is very close" in text  # the source came back word for word
    assert "[2] If x" not in echo_llm.requests[-1]["messages"][-1]["content"]
    assert [m.numbers for m in iter_markers(text)] == [(1,)]


def test_grammar_prompts_code_and_table_rows_are_never_quoted_as_sentences():
    source = PromptSource(
        1,
        1,
        "Lambdas",
        (
            'lambda_expr ::= "lambda" [parameter_list] ":" expression\n\n'
            ">>> square = lambda x: x * x and more words here\n\n"
            "def f(arg): pass    # a function that does nothing with lambda\n\n"
            "@decorator def lambda_thing(): return lambda in a decorated line\n\n"
            "Lambda expressions are used to create anonymous functions in Python.",
        ),
    )
    text = "".join(stream(Prompt(question="How do lambda expressions work?", sources=(source,))))
    assert text.startswith("Lambda expressions are used to create anonymous functions")
    for fragment in ("::=", ">>>", "# a function", "@decorator"):
        assert fragment not in text


def test_the_best_ranked_source_opens_the_answer_unless_another_matches_much_better():
    first = PromptSource(1, 1, "Yield", ("The yield statement produces a value from a generator.",))
    second = PromptSource(
        2, 2, "Generators", ("A generator function produces a value each time it is resumed.",)
    )
    prompt = Prompt(
        question="How does a generator function produce a value?", sources=(first, second)
    )
    # [2] matches one word more ("function"): one place in the ranking outweighs it.
    text = "".join(stream(prompt))
    assert text.index("[1]") < text.index("[2]")
    question = "How does a generator function produce a value each time it is resumed?"
    text = "".join(stream(Prompt(question=question, sources=(first, second))))
    assert text.index("[2]") < text.index("[1]")  # much better: it opens the answer
