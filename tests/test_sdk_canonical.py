"""Canonical JSON and hashing: one text per logical payload, whatever the construction order."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import math
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.canonical import (
    NonStringKeyError,
    _canonical_bytes_slow,
    canonical_bytes,
    canonical_json,
    canonicalize,
    loads,
    sha256_hex,
    tagged_keys,
)
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
    keys = [k.encode("utf-16-be", "surrogatepass") for k, _ in pairs]  # RFC 8785: by UTF-16 code units
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
        (float("nan"), "null"),
        (2**70, "1180591620717411303424"),
        ({"f": 1e-7, "big": -(2**70)}, '{"big":-1180591620717411303424,"f":1e-7}'),
        ({"f": 1.0, "big": 2**70, "s": "\ud800"}, '{"big":1180591620717411303424,"f":1.0,"s":"\\ud800"}'),
        ({"\U0001f600": 2**70, "\ufb33": 1.0}, '{"\U0001f600":1180591620717411303424,"\ufb33":1.0}'),
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


# --- RFC 8785 test vectors ---------------------------------------------------------------------------------
# Appendix B: IEEE-754 double (hex) -> its JSON text.
RFC_8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def _double(bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(bits))[0]


@pytest.mark.parametrize(("bits", "rfc_text"), RFC_8785_NUMBERS)
def test_each_rfc_8785_appendix_b_number_is_written_as_the_same_double(bits, rfc_text):
    """The text names the double RFC 8785's does, and stays a float (see the module docstring)."""
    number = _double(bits)
    text = canonical_json(number)
    assert float(text) == float(rfc_text) == number
    assert math.copysign(1, float(text)) == math.copysign(1, number)  # -0.0 stays -0.0
    assert isinstance(loads(text), float)
    assert text == repr(number).replace("e+0", "e+").replace("e-0", "e-")  # shortest digits, as repr
    assert canonical_json({"n": number}) == _canonical_bytes_slow({"n": number}).decode() == f'{{"n":{text}}}'
    if "." in rfc_text or "e" in rfc_text:  # not an integral double: the digits are RFC 8785's exactly
        assert _digits(text) == _digits(rfc_text)


def _digits(text: str) -> str:
    """The significant digits of a number's text."""
    return text.lstrip("-").split("e")[0].replace(".", "").strip("0")


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_nan_and_infinity_stay_null_where_rfc_8785_refuses_them(bits):
    # A documented deviation: refusing them would leave a payload unrecorded; the text stays valid JSON.
    assert canonical_json([_double(bits)]) == "[null]"


def test_the_rfc_8785_section_3_2_2_example():
    source = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], '
        '"string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", '
        '"literals": [null, true, false]}'
    )
    assert canonical_json(json.loads(source)) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


RFC_8785_SORTING = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}


def test_keys_sort_by_utf16_code_units_as_in_rfc_8785_section_3_2_3():
    expected = ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert list(json.loads(canonical_json(RFC_8785_SORTING))) == expected
    # The emoji (UTF-16 D83D DE00) sorts before U+FB33 although its code point is greater.
    assert list(json.loads(_canonical_bytes_slow(RFC_8785_SORTING))) == expected
    nested = {"outer": [RFC_8785_SORTING, {"\U0001f600": 1, "\uffff": 2}]}
    assert list(json.loads(canonical_json(nested))["outer"][1]) == ["\U0001f600", "\uffff"]


# RFC 8785 section 3.2.2.2: the short escapes, other controls as lowercase \u00xx, nothing else escaped.
ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


@pytest.mark.parametrize("code", [*range(0x20), 0x22, 0x2F, 0x5C, 0x7F, 0x80, 0x2028, 0xFFFF, 0x1F600])
def test_strings_are_escaped_as_rfc_8785_says(code):
    char = chr(code)
    expected = ESCAPES.get(char, f"\\u{code:04x}" if code < 0x20 else char)
    assert canonical_json(char) == f'"{expected}"'
    assert canonical_json({char: char}) == f'{{"{expected}":"{expected}"}}'


# --- no collisions ------------------------------------------------------------------------------------------
def _same_json(a, b) -> bool:
    """Equal as tailcut reads JSON: integers and floats are different values, floats compare as doubles
    (-0.0 is not 0.0), booleans are not numbers."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


# Few distinct leaves and keys, so that equal and nearly equal pairs are common.
near_scalars = (
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, -1, 0.0, -0.0, 1.0, 0.5, 1e21, 1e-7, 2**64, 2**64 + 1, float(2**64)])
    | st.sampled_from(["", "1", "a", "\U0001f600", "\ufb33", "\ud800", '"', "\\"])
)
near_values = st.recursive(
    near_scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["", "1", "a", "\U0001f600", "\ufb33"]), children, max_size=3)
    ),
    max_leaves=10,
)


@given(near_values, near_values)
def test_distinct_json_values_never_share_a_text(a, b):
    assert (canonical_bytes(a) == canonical_bytes(b)) == _same_json(a, b)


@given(json_values)
def test_the_text_parses_back_to_an_equal_value(value):
    assert _same_json(loads(canonical_bytes(value)), value)


@given(json_values | near_values)
def test_the_fast_path_writes_what_the_exact_path_writes(value):
    assert canonical_bytes(value) == _canonical_bytes_slow(value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_float_reads_back_as_itself(number):
    value = loads(canonical_json([number, {"n": number}]))
    assert _same_json(value, [number, {"n": number}])


def test_a_dict_with_a_non_string_key_is_refused_naming_the_key_and_where_it_is():
    with pytest.raises(NonStringKeyError, match=r"dict key 1 \(int\) at \$ is not a string"):
        canonical_bytes({1: "x", "1": "y"})  # once written {"1":"x","1":"y"}
    with pytest.raises(NonStringKeyError, match=r"dict key \(1, 2\) \(tuple\) at \$\[\'args\'\]\[1\]"):
        canonical_bytes({"args": [0, {(1, 2): "pair"}]})
    with pytest.raises(NonStringKeyError, match=r"at \$\[\'big\'\]"):
        canonical_bytes({"big": 2**70, "x": {"big": {None: 1}}} | {"big": {None: 1}})
    assert isinstance(NonStringKeyError("x"), TypeError | CanonicalEncodingError)


def test_tagged_keys_gives_non_string_keys_a_text_of_their_own():
    texts = {
        canonical_json(tagged_keys(v))
        for v in (
            {1: "x"},
            {"1": "x"},
            {1.5: "x"},
            {True: "x"},
            {None: "x"},
            {(1, 2): "x"},
            {1: "x", "1": "y"},
        )
    }
    assert len(texts) == 7
    assert canonical_json(tagged_keys({"1": "y", 1: "x"})) == '{"$map":[["1","y"],[1,"x"]]}'
    assert tagged_keys({"a": [1, {"b": 2}]}) == {"a": [1, {"b": 2}]}


@given(st.dictionaries(st.integers() | st.text(max_size=3) | st.booleans(), st.integers(), max_size=5))
def test_tagged_keys_can_be_read_back_to_the_dict(value):
    tagged = loads(canonical_json(tagged_keys(value)))
    pairs = tagged["$map"] if isinstance(tagged, dict) and "$map" in tagged else list(tagged.items())
    assert {(type(k), k): v for k, v in pairs} == {(type(k), k): v for k, v in value.items()}


def test_integers_and_floats_keep_their_kind():
    assert (
        canonical_json({"a": 1250, "b": 1250.0, "c": -0.0, "d": 1e16})
        == '{"a":1250,"b":1250.0,"c":-0.0,"d":1e+16}'
    )
    assert canonical_bytes(1) != canonical_bytes(1.0)


@pytest.mark.parametrize(
    "value",
    [
        {"\ufb33": 1, '\U0001f600"x\\': 2},  # an escaped quote, then a backslash before the closing one
        {"\ufb33": 1, "\\": "\U0001f600", "\U0001f600\\": 3},
        {"\ufb33": ["\U0001f600", '\\"\U0001f600"\\'], "\U0001f600": {"\ufb33": 0, "\U0001f601": 1}},
        {"k": "\U0001f600", "\ufb33": "\U00010000", "\U0010ffff": "\U0001f600"},
        {"\ue000": 1, "\U00010000": 2, "\ud7ff": 3},  # the edges of the ranges that sort otherwise
    ],
)
def test_astral_keys_are_found_among_astral_values(value):
    assert canonical_bytes(value) == _canonical_bytes_slow(value)
    assert json.loads(canonical_bytes(value), object_pairs_hook=_assert_sorted) == value
