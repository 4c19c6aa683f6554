"""Canonical JSON and hashing: one text per logical payload, whatever the construction order."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.canonical import canonical_json, canonicalize, loads, sha256_hex
from tailcut.errors import CanonicalEncodingError

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)


def _shuffled(value, rnd):
    """The same logical value with every dict rebuilt in a random key order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(json_values, st.randoms())
def test_dict_order_does_not_change_text_or_hash(value, rnd):
    assert canonical_json(_shuffled(value, rnd)) == canonical_json(value)
    assert canonicalize(_shuffled(value, rnd))[1] == canonicalize(value)[1]


@given(json_values)
def test_round_trip_is_stable(value):
    text = canonical_json(value)
    assert canonical_json(loads(text)) == text
    assert json.loads(text) == loads(text)


def _assert_sorted(pairs):
    keys = [k for k, _ in pairs]
    assert keys == sorted(keys)
    return dict(pairs)


@given(json_values)
def test_text_is_compact_sorted_json(value):
    text = canonical_json(value)
    assert json.loads(text, object_pairs_hook=_assert_sorted) == json.loads(json.dumps(value))
    assert "\n" not in text
    assert canonical_json(value) == text  # stable across calls


def test_hash_is_sha256_of_utf8_text():
    text, digest = canonicalize({"q": "é"})
    assert text == '{"q":"é"}'
    assert digest == sha256_hex(text.encode("utf-8")) == sha256_hex(text)
    assert len(digest) == 64


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:  # fields declared out of order: the text must still sort them
    y: int
    x: int


class Model:
    """Duck-typed pydantic model."""

    def model_dump(self, mode: str = "python"):
        assert mode == "json"
        return {"b": 2, "a": 1}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"\x00\xff", '{"$bytes":"AP8="}'),
        (bytearray(b"hi"), '{"$bytes":"aGk="}'),
        ({3, 1, 2}, "[1,2,3]"),
        (frozenset({"b", "a"}), '["a","b"]'),
        ((1, "a"), '[1,"a"]'),
        (decimal.Decimal("1.10"), '"1.10"'),
        (uuid.UUID(int=1), '"00000000-0000-0000-0000-000000000001"'),
        (Color.RED, '"red"'),
        (Point(1, 2), '{"x":2,"y":1}'),
        (Model(), '{"a":1,"b":2}'),
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), '"2026-01-02T03:04:05+00:00"'),
        (dt.date(2026, 1, 2), '"2026-01-02"'),
        ({1: "a", "b": 2}, '{"1":"a","b":2}'),
        (float("nan"), "null"),
        (2**70, "1180591620717411303424"),
        ({"f": 1e-7, "big": -(2**70)}, '{"big":-1180591620717411303424,"f":1e-7}'),
        ({"s": "\ud800"}, '{"s":"\\ud800"}'),
        ({"big": 2**70, "s": "é"}, '{"big":1180591620717411303424,"s":"é"}'),
    ],
)
def test_encoding_rules(value, expected):
    assert canonical_json(value) == expected


def test_unencodable_value_names_its_type():
    with pytest.raises(CanonicalEncodingError, match="object"):
        canonical_json({"x": object()})


SLICING_SIZES = [2046, 2047, 2048, 4094, 4095, 6000, 256 * 1024, 256 * 1024 + 1]


@given(st.sampled_from(SLICING_SIZES), st.binary(max_size=64))
def test_sha256_hex_is_sha256_at_every_size_it_hashes_in_slices(size: int, tail: bytes) -> None:
    """Payloads of a few KB are hashed slice by slice (GIL held); the digest must not change."""
    data = (tail or b"x") * (size // max(len(tail), 1) + 1)
    data = data[:size]
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert sha256_hex(data.decode("latin-1")) == hashlib.sha256(data.decode("latin-1").encode()).hexdigest()
