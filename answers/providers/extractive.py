"""The default provider: offline, deterministic, no model.

It quotes the sentences of the numbered sources that best match the question, each
followed by its ``[n]``, and streams them in small deltas. Weak sources stay uncited,
which is what ``finalize_citations`` is for.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..conf import answers_settings
from ..prompt import Prompt
from ..search.base import query_terms

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(`*])|\n\s*\n")
_WHITESPACE = re.compile(r"\s+")
# Quoted text must not add citations or open code spans that swallow ours.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|])")
_DELTA = re.compile(r"\S+\s*|\s+")
_MIN_SENTENCE, _MAX_SENTENCE = 25, 420
# reST underlines, table borders and rows: structure, not sentences.
_NOT_PROSE_LINE = re.compile(r"(?m)^\s*(?:[*=\-~^#+_.:|]{3,}|[|+].*)\s*$")
_LETTER = re.compile(r"[^\W\d_]")
# A grammar production ("funcdef ::= ..."), an interpreter prompt (">>> x"), a table row,
# a line of code with its comment ("def f(arg): pass # ..."): read badly as sentences.
_NOT_A_SENTENCE = re.compile(
    r"::=|^(?:>>>|\.\.\.)\s|\s{2,}\|\s|\+[-=]{3,}|^(?:def|class)\s+\w+.*:|^@\w|\s#\s"
)
_PER_SOURCE_RANK = 1.0


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _is_prose(sentence: str) -> bool:
    if len(sentence) < _MIN_SENTENCE or len(sentence.split()) < 5:
        return False
    if _NOT_A_SENTENCE.search(sentence):
        return False
    return len(_LETTER.findall(sentence)) >= 0.6 * len(sentence.replace(" ", ""))


def escape_markdown(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


@dataclass(frozen=True)
class _Candidate:
    score: float
    number: int
    position: int
    sentence: str


class ExtractiveProvider:
    name = "extractive"

    @property
    def model(self) -> str:
        return str(answers_settings.MODEL or "extractive-v1")

    def compose(self, prompt: Prompt) -> str:
        terms = {_stem(term) for term in query_terms(prompt.question)}
        candidates: list[_Candidate] = []
        for source in prompt.sources:
            text = _NOT_PROSE_LINE.sub("\n", "\n\n".join(source.passages))
            for position, raw in enumerate(_SENTENCE_END.split(text)):
                sentence = _WHITESPACE.sub(" ", raw).strip()
                if not _is_prose(sentence):
                    continue
                if len(sentence) > _MAX_SENTENCE:
                    sentence = sentence[:_MAX_SENTENCE].rsplit(" ", 1)[0] + " …"
                words = {_stem(word) for word in query_terms(sentence)}
                matched = len(terms & words)
                if matched:
                    # Earlier sentences and better-ranked sources win ties.
                    score = matched - position * 0.01 - source.number * 0.001
                    # Retrieval ranked the sources: a later source's sentence needs one more
                    # of the question's words per place to open the answer (ADR 0025).
                    score -= (source.number - 1) * _PER_SOURCE_RANK
                    candidates.append(_Candidate(score, source.number, position, sentence))
        if not candidates and prompt.sources:
            first = prompt.sources[0]
            opening = _SENTENCE_END.split("\n\n".join(first.passages))[0]
            sentence = _WHITESPACE.sub(" ", opening).strip()[:_MAX_SENTENCE]
            candidates.append(_Candidate(0.0, first.number, 0, sentence))
        chosen = self._choose(candidates, int(answers_settings.EXTRACTIVE_SENTENCES))
        return " ".join(f"{escape_markdown(c.sentence)} [{c.number}]" for c in chosen)

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
