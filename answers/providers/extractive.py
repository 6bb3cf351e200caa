"""The default provider: offline, deterministic, no model.

It quotes the sentences of the numbered sources that best answer the question, each
followed by its ``[n]``, and streams them in small deltas. Weak sources stay uncited,
which is what ``finalize_citations`` is for.

Passages are Markdown (ADR 0026): a quoted sentence keeps its code spans and emphasis and
is written back token by token from the renderer's own parse, so nothing in it can open a
block, a link or a code span that swallows the answer's markers, and a reference number
the document itself had (a footnote ``[4]``) is dropped or escaped, never a citation.
Headings, fenced code (grammar, examples, tables) and prompt lines are never sentences.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import AsyncIterator
from dataclasses import dataclass

from markdown_it.token import Token

from ..citations import parse_markdown
from ..conf import answers_settings
from ..markup import code_span
from ..prompt import MARKER_BREAK, Prompt
from ..rendering import visible_text
from ..search.base import query_terms
from ..support import FUNCTION_WORDS

# A document's own reference number, neutralized by the prompt (``[\u20604]``): a footnote
# where it ends a sentence or a clause, or labels one, and means nothing in an answer.
_OPENERS = "\\[\uff3b\u3010"
_NEUTRALIZED = re.compile(rf"[{_OPENERS}]{MARKER_BREAK}[^\]\uff3d\u3011\n]*[\]\uff3d\u3011]")
# Sentence ends (after a closing quote, bracket or emphasis too, and with a footnote number
# that follows dropped), paragraph breaks and list items (each item a sentence of its own).
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][)\"'\u201d\u2019*])|(?<=[.!?][)\"'\u201d\u2019*]{2}))"
    rf"(?:\s+{_NEUTRALIZED.pattern})?\s+(?=[A-Z0-9\"'\u201c\u2018(`*])"
    r"|\n\s*\n|\n(?=[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t])"
)
# A word wrapped at its hyphen ("pseudo-" / "compiled"): one word again.
_WRAPPED_HYPHEN = re.compile(r"(?<=[^\W\d_]-)\n[ \t]*(?=[^\W\d_])")
_WHITESPACE = re.compile(r"\s+")
_DELTA = re.compile(r"\S+\s*|\s+")
_MIN_SENTENCE, _MAX_SENTENCE = 25, 420
# reST underlines, table borders and rows, rules: structure, not sentences. (A line that
# starts with "+" but is no border, "+= f(x)` first ...", is a wrapped sentence.)
_NOT_PROSE_LINE = re.compile(r"(?m)^\s*(?:[*=\-~^#+_.:|]{3,}|\|.*)\s*$")
# Markdown headings (ingest writes every format's titles so, ADR 0026): never a sentence.
_HEADING_LINE = re.compile(r"(?m)^ {0,3}#{1,6}(?:[ \t].*)?$")
_FENCE_LINE = re.compile(r"(?m)^ {0,3}(`{3,}|~{3,})(.*)$")
_LETTER = re.compile(r"[^\W\d_]")
# A grammar production ("funcdef ::= ..."), an interpreter prompt (">>> x"), a table row,
# a line of code with its comment ("def f(arg): pass # ..."): read badly as sentences.
_NOT_A_SENTENCE = re.compile(
    r"::=|^(?:>>>|\.\.\.)\s|\s{2,}\|\s|\+[-=]{3,}|^(?:def|class)\s+\w+.*:|^@\w|\s#\s"
)
_PER_SOURCE_RANK = 1.0
# A lone number after a space mid-clause ("the cased characters [4] converted") is one
# too: shown, a reader takes it for a citation.
_FOOTNOTE = re.compile(
    rf"(?:^|\s+){_NEUTRALIZED.pattern}(?=$|[\s.,;:)])(?!\s+[a-z])|^{_NEUTRALIZED.pattern}\s*"
    rf"|(?<=\s)[{_OPENERS}]{MARKER_BREAK}\d{{1,4}}[\]\uff3d\u3011]\s+(?=[a-z])"
)
# A quoted sentence must read as one: it ends as a sentence does (not where a chunk was cut,
# not a list item's fragment, not announcing with ":" a block the answer does not show)
# and does not start in the middle of one.
_WHOLE_END = re.compile(r"[.!?][)\"'\u201d\u2019*]{0,3}$")
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d{1,9}[.)])\s+")
# A sentence that ends with ":" announces a block the answer does not show. It is quoted as
# a statement ("The `if` statement is used for conditional execution.") unless it only
# points at the block ("as follows", "the following", "is:") or is a bare condition.
_POINTS_AT_BLOCK = re.compile(
    r"\b(?:follow\w*|below|above|these|example\w*|one of|this way|as shown)\b"
    r"|\b(?:is|are|was|be|to|as|by|of|with|from|in|into|on|that|than|and|or|the|an?|"
    r"use|insert|means|like|namely|includes?|including)\W*$"
    r"|^(?:[-*+]\s+)?(?:if|when|unless|whether|where|while|for each|for every)\b[^,;]*$",
    re.I,
)
# "...; hence," or "..., for example:" before the block: the statement ends before it.
_BEFORE_BLOCK = re.compile(
    r"(?:[,;]?\s+(?:for example|for instance|e\.g\.|hence|thus|therefore))?\s*:$"
    r"|[,;]\s+(?:for example|for instance|e\.g\.|hence|thus|therefore),$",
    re.I,
)


def _any_word(alternatives: str) -> re.Pattern[str]:
    return re.compile(rf"\b(?:{alternatives})\b", re.I)


# Kinds of question (the first pattern asks it) and what in a sentence answers that kind
# (the second earns the bonus); in order, the first kind asked wins (tuned on dev).
_KINDS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "difference": (
        _any_word("difference|differ|differs|versus|vs|compared?|distinguish"),
        _any_word(r"unlike|whereas|while|but|instead|differ\w*|both|only|not"),
    ),
    "when": (
        re.compile(r"^\s*when\b|\bat what (?:point|time)\b|\bhow (?:soon|late)\b", re.I),
        _any_word(
            "when|whenever|before|after|until|once|time|during|runtime|executed|evaluated|called"
        ),
    ),
    "why": (
        re.compile(r"^\s*why\b", re.I),
        _any_word("because|so that|since|therefore|this means|in order to|avoid"),
    ),
    "definition": (
        re.compile(r"^\s*(?:what|who)\s+(?:is|are|does|do)\b|\bwhat\b.*\bmean\b", re.I),
        # "X is ...", "the X returns ...": the subject within five words, then its verb.
        re.compile(
            r"^(?:(?:the|a|an)\s+)?(?:\S+\s+){0,4}?(?:is|are|means|yields|returns|"
            r"evaluates to|refers to|denotes)\b",
            re.I,
        ),
    ),
    "how": (
        re.compile(r"^\s*how\b", re.I),
        _any_word("by|using|use|call|called|with|when|if|first|then"),
    ),
}
_KIND_BONUS = 0.5
# An opening that leans on the sentence before it ("It continues with the next cycle of the
# nearest enclosing loop."): that sentence, which names what "it" is, is quoted first.
_LEANS_BACK = re.compile(r"^(?:It|This|They|These|Its|Their)\b(?! is \S+(?: \S+)? (?:to|that)\b)")
_ANNOUNCES = 0.5
# Below this share of the question's words in the best sentence, the sources only touch
# on the question, and the answer says so first.
_TOUCHES_ON = 0.34
TOUCHES_ON = "The sources only touch on this question; the nearest they come:"


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _is_prose(sentence: str) -> bool:
    if len(sentence) < _MIN_SENTENCE or len(sentence.split()) < 5:
        return False
    plain = sentence.replace("`", "")
    if _NOT_A_SENTENCE.search(plain):
        return False
    return len(_LETTER.findall(plain)) >= 0.6 * len(plain.replace(" ", ""))


def _as_statement(sentence: str) -> str | None:
    if not sentence.endswith((":", ",")):
        return sentence  # the common case, without a scan of the sentence
    announced = _BEFORE_BLOCK.search(sentence)
    if announced is None:
        return sentence
    statement = sentence[: announced.start()].rstrip()
    if _POINTS_AT_BLOCK.search(statement.replace("`", "")):
        return None
    return statement if statement.endswith((".", "!", "?")) else statement + "."


def _is_whole(sentence: str) -> bool:
    if any(opener in sentence for opener in "[\uff3b\u3010"):  # _OPENERS: a footnote
        sentence = _FOOTNOTE.sub("", sentence)
    sentence = sentence.strip()
    if item := _LIST_ITEM.match(sentence):
        sentence = sentence[item.end() :]
    # _WHOLE_END read from the end: at most three closers after a sentence's last mark.
    ending = sentence[-4:]
    return bool(sentence) and not sentence[0].islower() and _WHOLE_END.search(ending) is not None


def _quotable(sentence: str) -> str | None:
    """``sentence`` as an answer quotes it (a statement for one that announced a block), or
    None if it is no whole sentence of prose."""
    if not _is_prose(sentence):
        return None
    statement = _as_statement(sentence)
    return statement if statement is not None and _is_whole(statement) else None


def _without_code_blocks(text: str) -> str:
    """``text`` without its fenced blocks. A passage is a chunk, which may begin inside a
    block (its first fence then closes one) or end inside one: of the two readings, the
    one that leaves out less prose is the right one."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if _FENCE_LINE.match(line)]
    if not fences:
        return text
    bounds = [*fences, len(lines)]
    opening = [(bounds[i], bounds[i + 1]) for i in range(0, len(fences), 2)]
    inside = [(-1, fences[0])] + [(bounds[i], bounds[i + 1]) for i in range(1, len(fences), 2)]

    def prose_in(spans: list[tuple[int, int]]) -> int:
        return sum(
            _is_prose(sentence)
            for first, last in spans
            for sentence in _SENTENCE_END.split("\n".join(lines[first + 1 : last]))
        )

    spans = inside if prose_in(inside) < prose_in(opening) else opening
    drop = {i for first, last in spans for i in range(max(first, 0), min(last + 1, len(lines)))}
    return "\n".join("" if i in drop else line for i, line in enumerate(lines))


# Characters of a text token that would start something once written back as Markdown.
_TEXT_HAZARD = re.compile(r"[\\`*_<&~\]\[!]")
_BLOCK_START = re.compile(r"^(?:[#>=|]|[-+*](?=\s|$)|\d{1,9}[.)](?=\s|$))")
_EDGE_IDENTIFIER = re.compile(r"(?<![\w])(?:_+[^\W_]\w*|[^\W\d]\w*_)(?:\(\))?(?!\w)")
_ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _escape_char(text: str, index: int) -> bool:
    char = text[index]
    # At a token's edge the neighbour is markup or a code span: neither a space nor a
    # letter, so "*" and "_" there are escaped.
    before = text[index - 1] if index else "\x00"
    after = text[index + 1] if index + 1 < len(text) else "\x00"
    if char == "\\":
        return after in _ASCII_PUNCTUATION or index + 1 == len(text)
    if char in "*_":
        # Only a delimiter that could open or close emphasis needs it.
        if char == "_" and before.isalnum() and after.isalnum():
            return False
        return not (before.isspace() and after.isspace())
    if char == "<":
        return after.isalpha() or after in "/!?"
    if char == "&":
        return re.match(r"&#?\w+;", text[index:]) is not None
    if char == "~":
        return after == "~" or before == "~"
    if char == "!":
        return after == "["
    if char == "[":
        return text.find("]", index) >= 0
    if char == "]":
        return after in "(["
    return True  # a backtick


def _escape_text(text: str) -> str:
    r"""A text token written back so it reads as the same text: identifiers that start or
    end with "_" in backticks (``__init__`` reads better so than ``\_\_init\_\_``), other
    hazards backslash-escaped, and only where they are one."""
    parts: list[str] = []
    last = 0
    for match in _EDGE_IDENTIFIER.finditer(text):
        if match.start() == 0 or match.end() == len(text):
            continue  # a code span beside markup could fuse with it: escaped instead
        parts.append(_escape_plain(text[last : match.start()]))
        parts.append(code_span(match[0]))
        last = match.end()
    parts.append(_escape_plain(text[last:]))
    return "".join(parts)


def _escape_plain(text: str) -> str:
    if not _TEXT_HAZARD.search(text):
        return text
    return "".join(
        "\\" + char if _TEXT_HAZARD.match(char) and _escape_char(text, i) else char
        for i, char in enumerate(text)
    )


def _merged_text(tokens: list[Token]) -> list[Token]:
    # markdown-it cuts text at every special character; escaping needs the whole run.
    merged: list[Token] = []
    for token in tokens:
        if token.type == "text" and merged and merged[-1].type == "text":
            merged[-1] = Token("text", "", 0, content=merged[-1].content + token.content)
        else:
            merged.append(token)
    return merged


def _write_inline(tokens: list[Token]) -> str:
    out: list[str] = []
    for token in _merged_text(tokens):
        kind = token.type
        if kind == "text":
            out.append(_escape_text(token.content))
        elif kind == "code_inline":
            # In code no bracket is a marker: the neutralizing character can go.
            out.append(code_span(token.content.replace(MARKER_BREAK, "")))
        elif kind in ("em_open", "em_close", "strong_open", "strong_close", "s_open", "s_close"):
            out.append(token.markup)  # "*" or "_" as written: they flank differently
        elif kind == "image":
            out.append(_write_inline(token.children or []))
        elif kind in ("softbreak", "hardbreak"):
            out.append(" ")
        elif kind in ("html_inline", "citation"):
            out.append(_escape_text(token.content))
        # link_open / link_close: the link text stays, the destination goes.
    return "".join(out)


def inline_markdown(sentence: str) -> str:
    """A quoted sentence as inline Markdown that renders to the same words: re-written
    from the renderer's own parse, on one line, opening no block."""
    sentence = _FOOTNOTE.sub("", sentence).strip()
    # A document's "a[1]" reads the same escaped, and needs no invisible character then.
    sentence = re.sub(rf"\[{MARKER_BREAK}", r"\\[", sentence)
    pieces = [
        _write_inline(token.children or [])
        for token in parse_markdown(sentence, {})
        if token.type == "inline"
    ]
    text = _BLOCK_START.sub(_escape_block_start, _WHITESPACE.sub(" ", " ".join(pieces)).strip())
    wanted = visible_text(sentence)
    if visible_text(text) != wanted:
        # Delimiters the write-back paired differently (``**1*<**``): the words alone,
        # every ASCII punctuation escaped, which CommonMark always reads as itself.
        text = _BLOCK_START.sub(_escape_block_start, _escape_every_punctuation(wanted))
    return text


def _escape_every_punctuation(text: str) -> str:
    return "".join("\\" + char if char in string.punctuation else char for char in text)


def _escape_block_start(match: re.Match[str]) -> str:
    # "# x", "> x", "- x", "1. x" at the start of the answer would open a block.
    return match[0][:-1] + "\\" + match[0][-1]


@dataclass(frozen=True)
class _Candidate:
    score: float
    number: int
    position: int
    sentence: str
    coverage: float


def _kind_of(question: str) -> re.Pattern[str] | None:
    for asks, answers in _KINDS.values():
        if asks.search(question):
            return answers
    return None


def _truncate(sentence: str) -> str:
    if len(sentence) <= _MAX_SENTENCE:
        return sentence
    cut = sentence[:_MAX_SENTENCE].rsplit(" ", 1)[0]
    if cut.count("`") % 2:  # never end inside a code span
        cut = cut[: cut.rfind("`")].rstrip()
    return cut + " …"


class ExtractiveProvider:
    name = "extractive"

    @property
    def model(self) -> str:
        return str(answers_settings.MODEL or "extractive-v1")

    @staticmethod
    def _sentences(passages: tuple[str, ...]) -> list[str]:
        text = "\n\n".join(_without_code_blocks(p) for p in passages)
        text = _NOT_PROSE_LINE.sub("\n", _HEADING_LINE.sub("\n", text))
        text = _WRAPPED_HYPHEN.sub("", text)
        return [_WHITESPACE.sub(" ", raw).strip() for raw in _SENTENCE_END.split(text)]

    def compose(self, prompt: Prompt) -> str:
        terms = {_stem(term) for term in query_terms(prompt.question)}
        # What the question is about: its words less those that are keywords in code.
        subject = {term for term in terms if term not in FUNCTION_WORDS} or terms
        kind = _kind_of(prompt.question)
        candidates: list[_Candidate] = []
        sentences_of: dict[int, list[str]] = {}
        for source in prompt.sources:
            sentences_of[source.number] = self._sentences(source.passages)
            for position, sentence in enumerate(sentences_of[source.number]):
                whole = _quotable(sentence)
                if whole is None:
                    continue
                announces, sentence = whole != sentence, whole
                sentence = _truncate(sentence)
                words = {_stem(word) for word in query_terms(sentence)}
                matched = len(terms & words)
                if matched:
                    # Earlier sentences and better-ranked sources win ties.
                    score = matched - position * 0.01 - source.number * 0.001
                    # Retrieval ranked the sources: a later source's sentence needs one more
                    # of the question's words per place to open the answer (ADR 0025).
                    score -= (source.number - 1) * _PER_SOURCE_RANK
                    if kind is not None and kind.search(sentence.replace("`", "")):
                        score += _KIND_BONUS
                    if announces:  # what it announced is not quoted
                        score -= _ANNOUNCES
                    coverage = len(subject & words) / len(subject)
                    candidates.append(
                        _Candidate(score, source.number, position, sentence, coverage)
                    )
        hedge = False
        if not candidates and prompt.sources:
            first = prompt.sources[0]
            sentences = self._sentences(first.passages)
            opening = next(
                (whole for s in sentences if (whole := _quotable(s)) is not None),
                next((s for s in sentences if _is_prose(s)), sentences[0] if sentences else ""),
            )
            candidates.append(_Candidate(0.0, first.number, 0, _truncate(opening), 0.0))
            hedge = True
        count = int(answers_settings.EXTRACTIVE_SENTENCES)
        chosen = self._choose(candidates, count)
        if chosen and not hedge and _LEANS_BACK.match(chosen[0].sentence):
            chosen = self._with_antecedent(chosen, sentences_of[chosen[0].number], count)
        quoted = [(inline_markdown(c.sentence), c.number) for c in chosen]
        answer = " ".join(f"{text} [{number}]" for text, number in quoted if text)
        if chosen and (hedge or chosen[0].coverage < _TOUCHES_ON) and len(subject) > 1:
            # Said in a paragraph of its own, so no cited claim carries these words.
            return f"{TOUCHES_ON}\n\n{answer}"
        return answer

    @staticmethod
    def _with_antecedent(
        chosen: list[_Candidate], sentences: list[str], count: int
    ) -> list[_Candidate]:
        opening = chosen[0]
        before = _quotable(sentences[opening.position - 1]) if opening.position else None
        if before is None:
            return chosen
        # Both from the opening's source, each with its marker; it may already be chosen.
        antecedent = _Candidate(
            opening.score, opening.number, opening.position - 1, _truncate(before), opening.coverage
        )
        rest = [
            c for c in chosen if (c.number, c.sentence) != (opening.number, antecedent.sentence)
        ]
        return [antecedent, *rest][: max(count, 2)]

    @staticmethod
    def _choose(candidates: list[_Candidate], count: int) -> list[_Candidate]:
        ranked, seen_sentences = [], set()
        # Documents often repeat each other; quoting the same sentence twice reads badly.
        for candidate in sorted(candidates, key=lambda c: (-c.score, c.number, c.position)):
            if candidate.sentence not in seen_sentences:
                seen_sentences.add(candidate.sentence)
                ranked.append(candidate)
        chosen: list[_Candidate] = []
        used_sources: set[int] = set()
        floor = ranked[0].score / 2 if ranked else 0.0
        # First the best sentence of each source that is nearly as good, then the next best.
        for candidate in ranked:
            if candidate.score < floor:
                break
            if len(chosen) < count and candidate.number not in used_sources:
                chosen.append(candidate)
                used_sources.add(candidate.number)
        for candidate in ranked:
            if len(chosen) >= count:
                break
            if candidate not in chosen:
                chosen.append(candidate)
        return chosen

    async def stream(self, prompt: Prompt) -> AsyncIterator[str]:
        delay = float(answers_settings.EXTRACTIVE_DELAY)
        words = _DELTA.findall(self.compose(prompt))
        for start in range(0, len(words), 3):
            yield "".join(words[start : start + 3])
            # Always yield to the loop, so a stop or disconnect cancels promptly.
            await asyncio.sleep(delay)
