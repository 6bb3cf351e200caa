"""Fixed questions: hit@5 questions with the demo topic each should find, and a latency set.

The expected value is a demo corpus document title (a ``pydoc_data.topics`` key).
"""

from __future__ import annotations

HIT_QUESTIONS: list[tuple[str, str]] = [
    ("What is a lambda expression?", "lambda"),
    ("How does the try statement work?", "try"),
    ("What does global do?", "global"),
    ("What does the nonlocal statement do?", "nonlocal"),
    ("How do I raise an exception?", "raise"),
    ("What does a yield expression do in a generator function?", "yield"),
    ("How does the with statement call a context manager?", "with"),
    ("What does the assert statement do?", "assert"),
    ("How does a while loop work?", "while"),
    ("How does the for statement iterate over an iterable?", "for"),
    ("What does the pass statement do?", "pass"),
    ("What does del do to a name?", "del"),
    ("How does the import statement find and load modules?", "import"),
    ("How is a class definition executed?", "class"),
    ("What does return do inside a function?", "return"),
    ("How does break terminate a loop?", "break"),
    ("What does continue do in a loop?", "continue"),
    ("How do replacement fields in format strings work?", "formatstrings"),
    ("How are slicings of a sequence written?", "slicings"),
    ("How does an await expression suspend a coroutine?", "await"),
    ("How do augmented assignment statements like += work?", "augassign"),
    ("What does the if statement evaluate?", "if"),
]

# The hit questions plus broader ones (several topics each, more terms), ~30 in all.
LATENCY_QUESTIONS: list[str] = [question for question, _ in HIT_QUESTIONS] + [
    "What is the difference between a list and a tuple?",
    "How does Python resolve names in nested function scopes?",
    "What are the rules for operator precedence in expressions?",
    "How do I define a function with default argument values?",
    "What happens when an exception is not handled by any except clause?",
    "How are dictionary keys hashed and compared?",
    "What is the truth value of an empty container?",
    "How does integer division round negative numbers?",
]

# Touches most of the demo corpus, so CANDIDATES=100 yields 32+ distinct documents.
BROAD_QUESTION = (
    "How do expressions, statements, objects, types, names, functions, classes, methods, "
    "modules, exceptions, loops, strings, numbers and operators work in Python?"
)
