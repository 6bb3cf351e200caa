"""answers.duplicates: MinHash signatures and their estimated similarity (ADR 0032)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from hypothesis import given, settings
from hypothesis import strategies as st

from answers import services
from answers.duplicates import (
    HASHES,
    body_signature,
    shingles,
    signature_similarity,
    signature_values,
    values_similarity,
)
from answers.models import Document
from tests.corpus import ingest_text

words = st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), min_size=0, max_size=300)
bodies = words.map(" ".join)


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_a_body_is_its_own_duplicate(body: str) -> None:
    signature = body_signature(body)
    assert signature == body_signature(body)  # stable: no per-process hash seed
    assert signature_similarity(signature, signature) == (1.0 if body.strip() else 0.0)


def _signature_as_first_stored(body: str) -> bytes:
    """The signature as ADR 0032 defined it: each shingle's BLAKE2b-64 as an integer, the
    HASHES smallest packed big-endian. Stored signatures must stay comparable."""
    import hashlib
    import heapq
    import struct

    hashes = {
        int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")
        for s in shingles(body)
    }
    return b"".join(struct.pack(">Q", h) for h in heapq.nsmallest(HASHES, hashes))


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_signatures_are_those_stored_before(body: str) -> None:
    assert body_signature(body) == _signature_as_first_stored(body)


def test_a_signature_is_pinned() -> None:
    # Written down once: a change of hash, order or packing would fail here even if the
    # reference above changed with it.
    signature = body_signature("The quick brown fox jumps over the lazy dog. " * 20)
    assert len(signature) == 8 * 9  # nine distinct shingles, ascending
    assert signature[:16].hex() == "1eb56fd3e69c566d4a29798bba41028c"


@settings(max_examples=300, deadline=None)
@given(bodies, bodies)
def test_similarity_is_symmetric_and_bounded(first: str, second: str) -> None:
    a, b = body_signature(first), body_signature(second)
    assert signature_similarity(a, b) == signature_similarity(b, a)
    assert 0.0 <= signature_similarity(a, b) <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=3, max_size=300, unique=True))
def test_bodies_without_a_shared_shingle_are_not_alike(numbers: list[int]) -> None:
    half = len(numbers) // 2
    first = " ".join(f"a{n}" for n in numbers[:half] or [0])
    second = " ".join(f"b{n}" for n in numbers[half:])
    # Only a 64-bit hash collision could make them share a value.
    assert signature_similarity(body_signature(first), body_signature(second)) == 0.0


def _similarity_as_first_defined(first: bytes, second: bytes) -> float:
    """The estimate as ADR 0032 defined it: both signatures' values, the HASHES smallest of
    their union, the share of those in both."""
    import heapq
    import struct

    def values(signature: bytes) -> set[int]:
        usable = signature[: len(signature) - len(signature) % 8]
        return {value for (value,) in struct.iter_unpack(">Q", usable)}

    a, b = values(first), values(second)
    if not a or not b:
        return 0.0
    union = heapq.nsmallest(HASHES, a | b)
    return sum(1 for h in union if h in a and h in b) / len(union)


# Signatures that share values, as near-duplicates do: some of a pool of hashes each.
_pool = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=160, unique=True)


@settings(max_examples=500, deadline=None)
@given(_pool, st.data())
def test_similarity_is_the_estimate_first_defined(pool: list[int], data: st.DataObject) -> None:
    def signature() -> bytes:
        chosen = data.draw(st.lists(st.sampled_from(pool), max_size=HASHES, unique=True))
        return b"".join(value.to_bytes(8, "big") for value in sorted(chosen))

    first, second = signature(), signature()
    expected = _similarity_as_first_defined(first, second)
    assert signature_similarity(first, second) == expected
    assert signature_similarity(memoryview(first), second) == expected
    # What retrieval compares: each document's values unpacked once.
    assert values_similarity(signature_values(first), signature_values(second)) == expected
    # A trailing partial value (never stored) is ignored, as it always was.
    assert signature_similarity(first + b"\x01\x02", second) == expected


def test_small_bodies_are_compared_exactly() -> None:
    # Under HASHES shingles the signature keeps them all: the estimate is the Jaccard.
    first = "one two three four five six"  # 4 shingles
    second = "one two three four five seven"  # 3 shared of 5 in all
    assert len(shingles(first)) < HASHES
    assert signature_similarity(body_signature(first), body_signature(second)) == 3 / 5


def test_estimate_is_close_for_large_bodies() -> None:
    base = [f"w{i}" for i in range(2000)]
    # The same page with a tenth of its words changed: about 0.75 of the shingles survive
    # (each change breaks 3 shingles), a Jaccard of about 0.6.
    changed = [w if i % 10 else f"x{i}" for i, w in enumerate(base)]
    exact = len(shingles(" ".join(base)) & shingles(" ".join(changed))) / len(
        shingles(" ".join(base)) | shingles(" ".join(changed))
    )
    estimate = signature_similarity(
        body_signature(" ".join(base)), body_signature(" ".join(changed))
    )
    assert abs(estimate - exact) < 0.2  # 64 values: the standard error is about 0.06


def test_no_signature_is_no_duplicate() -> None:
    signature = body_signature("some words of a page")
    assert body_signature("") == b"" and body_signature("  ,;  ") == b""
    assert signature_similarity(b"", signature) == 0.0
    assert signature_similarity(memoryview(signature), signature) == 1.0  # PostgreSQL bytea
    assert len(body_signature(" ".join(f"w{i}" for i in range(1000)))) == HASHES * 8


# The stored signature (answers.services, migration 0012)


@pytest.mark.django_db
def test_ingest_and_save_store_the_bodys_signature() -> None:
    body = "The zorblat flange is calibrated with a brass wrenchlet every spring."
    document = ingest_text("dup-test:a", "Zorblat", body).document
    document.refresh_from_db()
    assert bytes(document.near_signature) == body_signature(body)
    document.body = "A quimbly sprocket is greased with goose fat every month."
    services.document_save(document=document, chunk_size=1200)
    document.refresh_from_db()
    assert bytes(document.near_signature) == body_signature(document.body)


@pytest.mark.django_db
def test_the_migration_backfills_existing_documents() -> None:
    document = ingest_text("dup-test:b", "Zorblat", "words of an older document").document
    Document.objects.filter(pk=document.pk).update(near_signature=None)
    backfill = importlib.import_module("answers.migrations.0012_document_near_signature").backfill
    backfill(django_apps, None)
    document.refresh_from_db()
    assert bytes(document.near_signature) == body_signature("words of an older document")
