"""Rerankers reorder the candidates above the threshold; none is used by default.

A reranker is any class with ``rerank(question, candidates) -> list[float]`` returning one
score per candidate (higher is better); candidates are then sorted by that score.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Protocol

from django.core.checks import CheckMessage, Error

from .conf import answers_settings
from .search.base import query_terms


class RerankCandidate(Protocol):
    @property
    def text(self) -> str: ...

    @property
    def title(self) -> str: ...


class Reranker(Protocol):
    def rerank(self, question: str, candidates: Sequence[RerankCandidate]) -> list[float]: ...


class TermOverlapReranker:
    """A small example reranker: the share of the question's terms found in the chunk."""

    def rerank(self, question: str, candidates: Sequence[RerankCandidate]) -> list[float]:
        terms = set(query_terms(question))
        if not terms:
            return [0.0 for _ in candidates]
        scores = []
        for candidate in candidates:
            found = set(query_terms(f"{candidate.title} {candidate.text}"))
            scores.append(len(terms & found) / len(terms))
        return scores


class RerankerError(Exception):
    """The reranker could not score the candidates; the un-reranked order is kept."""


class HttpReranker:
    """A cross-encoder behind the ``/rerank`` API of text-embeddings-inference, vLLM,
    Infinity, Jina or Cohere (``ANSWERS['RERANK_*']``).

    ``RERANK_API = "cohere"`` posts ``{model, query, documents, top_n}`` and reads
    ``{"results": [{"index", "relevance_score"}]}``; ``"tei"`` posts ``{query, texts}`` and
    reads ``[{"index", "score"}]``. Either response shape is accepted from either. Any
    failure (connection, timeout, HTTP error, malformed body, a score missing or not finite,
    an index out of range, a body too large or too slow in all) raises ``RerankerError``;
    the pipeline then keeps the search's order.
    """

    @classmethod
    def check(cls) -> list[CheckMessage]:
        errors: list[CheckMessage] = []
        url = str(answers_settings.RERANK_URL)
        if not url.startswith(("http://", "https://")):
            errors.append(
                Error(
                    "ANSWERS['RERANK_URL'] must be the http(s) URL of a /rerank endpoint "
                    "when RERANKER is answers.rerankers.HttpReranker.",
                    id="answers.E020",
                )
            )
        if answers_settings.RERANK_API not in ("cohere", "tei"):
            errors.append(
                Error("ANSWERS['RERANK_API'] must be 'cohere' or 'tei'.", id="answers.E021")
            )
        return errors

    def _body(self, question: str, texts: list[str]) -> dict[str, Any]:
        if answers_settings.RERANK_API == "tei":
            return {"query": question, "texts": texts}
        body: dict[str, Any] = {"query": question, "documents": texts, "top_n": len(texts)}
        if answers_settings.RERANK_MODEL:
            body["model"] = str(answers_settings.RERANK_MODEL)
        return body

    def rerank(self, question: str, candidates: Sequence[RerankCandidate]) -> list[float]:
        texts = [f"{c.title}\n{c.text}" for c in candidates]
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if answers_settings.RERANK_API_KEY:
            headers["Authorization"] = f"Bearer {answers_settings.RERANK_API_KEY}"
        url = str(answers_settings.RERANK_URL)
        if not url.startswith(("http://", "https://")):
            raise RerankerError("RERANK_URL is not an http(s) URL")
        request = urllib.request.Request(  # noqa: S310 (http(s) only, checked above)
            url,
            data=json.dumps(self._body(question, texts)).encode(),
            headers=headers,
            method="POST",
        )
        timeout = float(answers_settings.RERANK_TIMEOUT)
        try:
            with urllib.request.urlopen(  # noqa: S310 (http(s) only, checked above)
                request, timeout=timeout
            ) as response:
                payload = json.loads(_body_within(response, timeout=timeout))
        except urllib.error.HTTPError as exc:
            raise RerankerError(f"reranker returned HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RerankerError(f"reranker unreachable: {reason}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RerankerError("reranker returned malformed JSON") from None
        return _scores(payload, count=len(texts))


# Far more than any list of scores: a server that sends more is not a reranker.
_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def _body_within(response: Any, *, timeout: float) -> bytes:
    """The response body, read within about ``timeout`` in all: the socket's timeout bounds
    each read, and a server that sends a byte at a time would reset it at every one."""
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read1(65536):
        size += len(chunk)
        if size > _MAX_RESPONSE_BYTES:
            raise RerankerError(f"reranker response is over {_MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise RerankerError(f"reranker took longer than {timeout:g} s")
    return b"".join(chunks)


def _scores(payload: Any, *, count: int) -> list[float]:
    results = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(results, list):
        raise RerankerError("reranker response has no list of results")
    scores: dict[int, float] = {}
    for item in results:
        if not isinstance(item, dict):
            raise RerankerError("reranker result is not an object")
        index = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < count
            or not isinstance(score, int | float)
            or isinstance(score, bool)
            or not math.isfinite(score)  # NaN sorts nowhere: the order would be arbitrary
        ):
            raise RerankerError("reranker result has a bad index or score")
        scores[index] = float(score)
    if len(scores) != count:
        raise RerankerError(f"reranker scored {len(scores)} of {count} candidates")
    return [scores[i] for i in range(count)]
