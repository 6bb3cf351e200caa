"""Near-duplicate documents: MinHash signatures of a body and their estimated similarity.

Pure (no database, no settings). A body's word 3-shingles are hashed once each with BLAKE2b
(stable across processes and versions, unlike ``hash()``), and its signature is the
``HASHES`` smallest hash values: the bottom-k form of MinHash (Broder, 1997), which needs
one hash per shingle where the k-mins form needs ``HASHES`` (measured 3-5x slower in pure
Python on Django's larger pages). The similarity of two bodies is estimated from the
``HASHES`` smallest values of the two signatures together: the share of those that both
signatures hold estimates the Jaccard similarity of the two shingle sets. A body of fewer
than ``HASHES`` shingles keeps them all, and the estimate is then exact.

Signatures are stored on the document (ADR 0032) so retrieval compares only the handful of
candidates it already holds.
"""

from __future__ import annotations

import hashlib
import heapq
import re
import struct
from functools import lru_cache

HASHES = 64
SHINGLE_WORDS = 3
# Signatures unpacked lately: retrieval compares the same few documents' signatures with
# each other answer after answer. Each entry is 64 integers (about 5 KB).
SIGNATURE_CACHE_SIZE = 1024
_WORD = re.compile(r"\w+")


def shingles(body: str) -> set[str]:
    """The body's distinct word 3-shingles (lower-cased ``\\w+`` words); a body of fewer
    words gives its words as one shingle, and an empty one none."""
    words = _WORD.findall(body.lower())
    if len(words) < SHINGLE_WORDS:
        return {" ".join(words)} if words else set()
    return set(map(" ".join, zip(words, words[1:], words[2:], strict=False)))


def body_signature(body: str) -> bytes:
    """The MinHash signature of a document body: its ``HASHES`` smallest 64-bit shingle
    hashes, ascending, packed (at most 512 bytes); ``b""`` for a body with no words, which
    is no one's near-duplicate.

    The one function every ingest path calls, so all writers store the same signature."""
    blake2b = hashlib.blake2b
    # Big-endian 8-byte digests order as the integers they pack: the smallest are kept as
    # they come, without an int and a pack per shingle (a third of this function's time).
    digests = {blake2b(s.encode(), digest_size=8).digest() for s in shingles(body)}
    return b"".join(heapq.nsmallest(HASHES, digests))


@lru_cache(maxsize=SIGNATURE_CACHE_SIZE)
def _values(signature: bytes) -> frozenset[int]:
    count = len(signature) // 8  # a trailing partial value (never stored) is ignored
    return frozenset(struct.unpack(f">{count}Q", signature[: count * 8]))


def signature_values(signature: bytes | memoryview) -> frozenset[int]:
    """The hash values a signature holds, for ``values_similarity`` (unpacked once per
    signature while it stays in the cache; PostgreSQL's bytea comes as a memoryview)."""
    return _values(bytes(signature))


def values_similarity(a: frozenset[int], b: frozenset[int]) -> float:
    """``signature_similarity`` of the signatures these values came from: a caller that
    compares one document with several keeps its values instead of unpacking again."""
    if not a or not b:
        return 0.0
    both = a & b
    if not both:
        # Most pairs, and a retrieval compares some 170 of them: no shared value, no
        # share of one (the count below would be 0).
        return 0.0
    # The k smallest of the union of the two bodies' shingles are the k smallest of the
    # union of their signatures; the share of them in both estimates |A and B| / |A or B|.
    # sorted() rather than heapq.nsmallest: one C call on at most 2k values.
    union = sorted(a | b)[:HASHES]
    return len(both.intersection(union)) / len(union)


def signature_similarity(first: bytes | memoryview, second: bytes | memoryview) -> float:
    """Estimated Jaccard similarity (0..1) of the two bodies whose signatures these are;
    0 when either has none (no words, or not computed), so a missing signature never makes
    a duplicate."""
    return values_similarity(signature_values(first), signature_values(second))
