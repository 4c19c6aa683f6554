"""The probabilistic policy's hash: the OpenTelemetry Collector's FNV-1a and threshold, exactly."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.collector._hash import DEFAULT_HASH_SALT, TraceIdSampler, fnv1a_64, sampling_threshold

MAX = 2**64 - 1


def reference_fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits, written from the algorithm's definition (offset basis, prime, xor then multiply)."""
    h = 14695981039346656037
    for octet in data:
        h ^= octet
        h = (h * 1099511628211) % 2**64
    return h


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),  # the offset basis itself
        (b"a", 0xAF63DC4C8601EC8C),  # published FNV-1a test vectors
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a_matches_published_vectors(data, expected):
    assert fnv1a_64(data) == expected


def test_hash_covers_salt_then_trace_id_bytes():
    # Worked by hand from the definition: one byte 0x61 ("a") as salt, then 16 trace-id bytes 0x00..0x0f.
    trace_id = bytes(range(16))
    sampler = TraceIdSampler(50, "a")
    assert sampler.hash(trace_id) == reference_fnv1a_64(b"a" + trace_id)
    # The default salt is the Collector's "default-hash-seed" and is used when the salt is empty.
    assert TraceIdSampler(50).salt == DEFAULT_HASH_SALT == "default-hash-seed"
    assert TraceIdSampler(50).hash(trace_id) == reference_fnv1a_64(b"default-hash-seed" + trace_id)


@given(st.binary(min_size=16, max_size=16), st.text(max_size=20))
def test_hash_is_fnv1a_of_salt_then_id(trace_id, salt):
    sampler = TraceIdSampler(10, salt)
    assert sampler.hash(trace_id) == reference_fnv1a_64((salt or DEFAULT_HASH_SALT).encode() + trace_id)


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (0.0, 0),
        (1.0, MAX),
        (2.0, MAX),  # >= 100% keeps everything
        (0.5, 2**63 - 1),  # (2^64-1)/2 = 2^63 - 0.5 is exact in 64 bits; truncation gives 2^63 - 1
        (0.25, 2**62 - 1),  # 2^62 - 0.25, exact with 64 bits of mantissa, truncated
    ],
)
def test_threshold_vectors(ratio, expected):
    assert sampling_threshold(ratio) == expected


@given(st.floats(min_value=2**-12, max_value=1.0))
def test_threshold_is_the_truncated_product(ratio):
    # Go rounds MaxUint64 * ratio to 64 mantissa bits before truncating; for ratios a config can state
    # (>= 2^-12) that rounding never crosses an integer, so the threshold is floor((2^64 - 1) * ratio).
    from fractions import Fraction

    assert sampling_threshold(ratio) == math.floor(Fraction(MAX) * Fraction(ratio))


def test_sampled_means_hash_at_most_threshold():
    sampler = TraceIdSampler(5)
    rng = random.Random(1)
    for _ in range(2000):
        trace_id = rng.randbytes(16)
        assert sampler.sampled(trace_id) == (sampler.hash(trace_id) <= sampler.threshold)


@pytest.mark.parametrize("percentage", [5, 25])
def test_kept_fraction_is_within_four_standard_errors(percentage):
    sampler = TraceIdSampler(percentage, "tailcut-test")
    rng = random.Random(percentage)
    n = 100_000
    kept = sum(sampler.sampled(rng.randbytes(16)) for _ in range(n))
    p = percentage / 100
    assert abs(kept / n - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_membership_depends_on_the_salt():
    ids = [random.Random(7).randbytes(16) for _ in range(1)] + [bytes([i]) * 16 for i in range(1, 200)]
    first = [TraceIdSampler(50, "one").sampled(i) for i in ids]
    second = [TraceIdSampler(50, "two").sampled(i) for i in ids]
    assert first != second
