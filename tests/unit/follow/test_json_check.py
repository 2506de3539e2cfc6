"""The C loop's JSON check (shaping/_json_check.h) is sound: every document it calls certainly
JSON, orjson (what queries decode with) accepts; it accepts the values a store usually holds
(so it does take them past the Python check), and refuses what orjson refuses."""

from __future__ import annotations

import random

import orjson
import pytest

from globalstore.follow import native

if not native.BUILT:  # pragma: no cover - the C loop is built wherever a compiler is
    pytest.skip("the C loop is not built", allow_module_level=True)

from globalstore.follow._native import json_certain

TYPICAL = [
    b'{"id": "key-00000001", "status": "paid", "amount": 12.5, "items": 3, "note": "xx"}',
    b'{"a": [1, -2, 3.25e-10, 0, -0.5, true, false, null, {}, []], "b": {"c": "\\u00e9\\n"}}',
    '{"name": "Zoë 東京 🚀", "t": "tab\\there"}'.encode(),
    b" \n[ ] ",
    b'"just a string"',
    b"42",
]
REFUSED_BY_ORJSON = [
    b"",
    b"not json {",
    b'{"a": 1,}',
    b'{"a" 1}',
    b"[1, 2",
    b"01",
    b"NaN",
    b'"\xff"',
    b'"tab\there"',
    b"{} {}",
    b'{"id": "not json',
]


@pytest.mark.parametrize("value", TYPICAL)
def test_typical_values_are_certainly_json(value: bytes) -> None:
    orjson.loads(value)
    assert json_certain(value)


@pytest.mark.parametrize("value", REFUSED_BY_ORJSON)
def test_what_orjson_refuses_is_never_certain(value: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(value)
    assert not json_certain(value)


def test_unsure_cases_go_to_python() -> None:
    # Valid for orjson or not, the check leaves these to the Python check.
    for value in (b'"\\ud83d\\ude80"', b"1e999", b"1" * 201, b"[" * 65 + b"]" * 65):
        assert not json_certain(value)


@pytest.mark.parametrize(
    "number",
    [
        b"0.8444218515250481",  # a float as Python's repr writes it: 16 digits
        b"-0.12345678901234567890123456789",  # a fraction longer than a double holds
        b"12345678901234567890",  # an integer past 64 bits: a float to orjson
        b"1" * 200,
        b"9" * 200 + b".5e99",  # the largest the check takes: below 1e300
        b"1e-99",
        b"0." + b"0" * 400 + b"1",  # read as 0.0
    ],
)
def test_numbers_of_any_precision_are_certainly_json(number: bytes) -> None:
    value = b'{"customer": "c-1", "amount": ' + number + b"}"
    assert orjson.loads(value)["customer"] == "c-1"
    assert json_certain(value)


def test_a_number_that_could_overflow_a_double_is_never_certain() -> None:
    for number in (b"2" * 309, b"1e309", b"9" * 200 + b"e999"):
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(number)
        assert not json_certain(number)


def test_mutations_it_accepts_orjson_accepts_too() -> None:
    rng = random.Random(7)
    alphabet = b' \t\n{}[]:,"\\-+.0123456789eEtruefalsnu\x00\x1f\x7f\xc3\xa9\xed\xa0\x80\xff'
    accepted = 0
    for _ in range(50_000):
        value = bytearray(rng.choice(TYPICAL))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(value) + 1)
            op = rng.randrange(3)
            if op == 0 and i < len(value):
                del value[i]
            elif op == 1:
                value.insert(i, rng.choice(alphabet))
            elif i < len(value):
                value[i] = rng.choice(alphabet)
        if json_certain(bytes(value)):
            accepted += 1
            orjson.loads(bytes(value))  # raises if the check was wrong
    assert accepted > 1_000  # the mutations did reach valid documents


def test_every_byte_at_every_place_of_a_long_string() -> None:
    # A string's plain bytes are skipped 8 at a time: a byte it may not hold as it is (a
    # quote, a backslash, a control byte, a byte of a UTF-8 sequence) is seen wherever it
    # lies, and a string ending at any place of such a window ends there.
    for pos in range(24):
        for byte in range(256):
            value = b'{"k": "' + b"a" * pos + bytes([byte]) + b"x" * (23 - pos) + b'"}'
            if 0x20 <= byte < 0x80 and byte not in b'"\\':
                orjson.loads(value)
                assert json_certain(value), (pos, byte)
            else:
                with pytest.raises(orjson.JSONDecodeError):
                    orjson.loads(value)
                assert not json_certain(value), (pos, byte)
        for inner in ("é", "東", "🚀", "\\n", "\\u00e9", '\\"'):
            value = b'["' + b"a" * pos + inner.encode() + b"b" * (23 - pos) + b'"]'
            assert json_certain(value), (pos, inner)
        assert not json_certain(b'"' + b"a" * pos)  # never closed
        assert json_certain(b'"' + b"a" * pos + b'"')
