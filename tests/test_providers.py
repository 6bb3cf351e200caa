from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync

from answers.citations import iter_markers
from answers.prompt import MARKER_BREAK, Prompt, PromptSource, neutralize_markers
from answers.providers.extractive import TOUCHES_ON, ExtractiveProvider
from answers.providers.openai import OpenAIProvider
from answers.rendering import visible_text
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


# --- An answer reads as whole sentences -------------------------------------------------
# Passages as the demo corpus's chunks are (pydoc text converted to Markdown, ADR 0026):
# wrapped lines, chunks cut anywhere, blocks announced by a sentence ending in ":".


def _claims(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Each cited sentence as the reader sees it, with the numbers its marker cites."""
    claims, last = [], 0
    if text.startswith(TOUCHES_ON):  # uncited, in a paragraph of its own
        last = len(TOUCHES_ON)
    for marker in iter_markers(text):
        claims.append((visible_text(text[last : marker.start]).strip(), marker.numbers))
        last = marker.end
    return claims


def _answer(question: str, *passages: str) -> str:
    sources = tuple(PromptSource(n, n, f"Doc {n}", (p,)) for n, p in enumerate(passages, 1))
    return "".join(stream(Prompt(question=question, sources=sources)))


CALLS = (
    "If keyword arguments are present, they are first converted to positional\n"
    "arguments, as follows.  If the slot is already filled, a `TypeError`\n"
    "exception is raised.  If there are any unfilled\n"
    "slots for which no default value is specified, a `TypeError` exception"
)
NAMING = (
    "*Names* refer to objects.  Names are introduced by name binding\noperations.\n\n"
    "The following constructs bind names:\n\n"
    "* formal parameters to functions,\n\n* class definitions,\n\n* function definitions,\n\n"
    "* targets that are identifiers if occurring in an assignment"
)
IMPORT = (
    "The basic import statement (no `from` clause) is executed in two\nsteps:\n\n"
    "1. find a module, loading and initializing it if necessary\n\n"
    "2. define a name or names in the local namespace for the scope where\n"
    "   the `import` statement occurs.\n\n"
    "The first form of import statement binds the module name in the local\n"
    "namespace to the module object."
)
RANGES = (
    "ed a lot of memory, so the range type saves memory when looping over numbers.\n\n"
    "class range(stop)\nclass range(start, stop[, step])\n\n"
    "   The arguments to the range constructor must be integers (either\n"
    "   built-in `int` or any object that implements the `__index__()`\n   special method)."
)


PASS = (
    "`pass` is a null operation — when it is executed, nothing happens.\nIt is useful as a "
    "placeholder when a statement is required syntactically, but no\ncode needs to be "
    "executed, for example:\n\n```python3\ndef f(arg): pass\n```"
)


def test_every_quoted_sentence_is_whole_and_cites_the_source_it_is_from():
    passages = {1: CALLS, 2: NAMING, 3: IMPORT, 4: RANGES, 5: PASS}
    questions = (
        "What happens when a slot for a keyword argument is already filled or unfilled?",
        "Which constructs bind names?",
        "How is the basic import statement executed and how does it find a module?",
        "What arguments does the range constructor take?",
        "What statement is a placeholder when syntax requires one?",
    )
    for question in questions:
        text = _answer(question, *passages.values())
        claims = _claims(text)
        assert claims, question
        for sentence, numbers in claims:
            # Not cut at a chunk's end, not a list item's fragment, not announcing a
            # block the answer does not show: it ends and starts as a sentence does.
            assert re.search(r"[.!?][)\"'\u201d\u2019*]*$", sentence), (question, sentence)
            assert not sentence[0].islower(), (question, sentence)
            assert "range(stop)" not in sentence, "a signature is not a sentence"
            (number,) = numbers
            source = " ".join(visible_text(passages[number]).split())
            # Word for word; one that announced a block it does not show ends with a period.
            assert sentence.removesuffix(".") in source, (question, sentence, number)


def test_a_sentence_announcing_a_block_is_quoted_as_a_statement_or_not_at_all():
    text = _answer("What statement is a placeholder when syntax requires one?", PASS)
    assert (
        "It is useful as a placeholder when a statement is required syntactically, but no "
        "code needs to be executed. [1]"
    ) in text
    text = _answer("Which constructs bind names?", NAMING)
    assert "The following constructs bind names" not in text
    classes = (
        "Classes without an inheritance list inherit, by default, from the base class\n"
        "`object`; hence,\n\n```python3\nclass Foo:\n    pass\n```\n\nis equivalent to\n\n"
        "```python3\nclass Foo(object):\n    pass\n```"
    )
    text = _answer("How do I define a class that inherits from another class?", classes)
    assert text == (
        "Classes without an inheritance list inherit, by default, from the base class `object`. [1]"
    )


def test_words_wrapped_at_a_hyphen_and_lines_starting_with_plus_read_as_written():
    code = (
        "Code objects represent “pseudo-\ncompiled” executable Python code such as a\n"
        "function body.  Code objects are returned by the built-\nin `compile()` function."
    )
    text = _answer("What are code objects and what returns them?", code)
    assert "“pseudo-compiled” executable" in text and "built-in `compile()`" in text
    assert "- " not in visible_text(text)
    augmented = (
        "Augmented assignments evaluate the left-hand side before the right-hand side.\n"
        "For example, `a[i]\n+= f(x)` first looks-up `a[i]`, then it evaluates `f(x)` and "
        "performs\nthe addition, and lastly, it writes the result back to `a[i]`."
    )
    text = _answer(
        "In what order does an augmented assignment like a[i] += f(x) evaluate?", augmented
    )
    # A line that starts with "+=" is the middle of a sentence, not a table row.
    assert "For example, `a[i] += f(x)` first looks-up `a[i]`" in text
    assert not any(s.startswith("the addition") for s, _ in _claims(text))


def test_a_documents_reference_numbers_never_show_as_bracketed_numbers():
    passage = (
        "str.upper()\n\n   Return a copy of the string with all the cased characters [4]\n"
        "   converted to uppercase.  The uppercasing algorithm used is described\n"
        "   in section 3.13 of the Unicode Standard.\n\n"
        "Free variables are not resolved in the nearest enclosing namespace, but in the "
        "global namespace.  [1]\nThe `exec()` and `eval()` functions have optional arguments "
        "to override the global namespace."
    )
    for question in (
        "How do I convert a string to upper case?",
        "How are free variables resolved?",
    ):
        text = _answer(question, passage)
        shown = visible_text(text)
        # The only bracketed numbers a reader sees are the answer's citations, each after
        # the one sentence it cites.
        assert re.findall(r"\[\d+\]", shown) == ["[1]"] * len(_claims(text)), shown
        assert all(s.count(". ") == 0 for s, _ in _claims(text)), text


def test_an_opening_that_says_it_opens_with_the_sentence_that_names_it():
    passage = (
        "`continue` may only occur syntactically nested in a `for` or `while` loop, but\n"
        "not nested in a function or class definition within that loop.  It continues\n"
        "with the next cycle of the nearest enclosing loop.\n\nWhen `continue` passes control "
        "out of a `try` statement with a `finally` clause, that `finally` clause is executed."
    )
    text = _answer("How do I jump to the next cycle of a loop?", passage)
    sentences = [sentence for sentence, _ in _claims(text)]
    assert sentences[:2] == [
        "continue may only occur syntactically nested in a for or while loop, but not nested "
        "in a function or class definition within that loop.",
        "It continues with the next cycle of the nearest enclosing loop.",
    ]
    assert len(sentences) == len(set(sentences)) <= 3
    text = _answer("What statement is a placeholder when syntax requires one?", PASS)
    assert text.startswith("`pass` is a null operation — when it is executed, nothing happens. [1]")
