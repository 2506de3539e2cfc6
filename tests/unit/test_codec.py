"""The on-disk value layout: header + raw JSON, legacy bare JSON, and errors that say where."""

from __future__ import annotations

import pytest

from globalstore import InvalidValue
from globalstore.codec import (
    HEADER,
    HEADER_SIZE,
    UNKNOWN,
    UNREADABLE_FORMAT,
    UNREADABLE_HEADERS,
    VALUE_FORMAT_HEADER,
    VALUE_FORMAT_VERSION,
    decode,
    decode_entry,
    encode_key,
    encode_value,
    format_headers,
    origin,
    pack,
    value_format,
)


def test_pack_keeps_value_bytes_and_origin() -> None:
    raw = pack(b'{"a":1}', 1_700_000_000_123, 4, 987_654_321_000)
    assert raw[HEADER_SIZE:] == b'{"a":1}'
    assert origin(raw) == (1_700_000_000_123, 4, 987_654_321_000)
    assert decode(raw, b"k", "t") == {"a": 1}
    entry = decode_entry(raw, b"k", "t")
    assert (entry.key, entry.value, entry.timestamp, entry.partition, entry.offset) == (
        "k",
        {"a": 1},
        1_700_000_000_123,
        4,
        987_654_321_000,
    )


def test_invalid_json_names_topic_partition_offset() -> None:
    raw = pack(b"{not json", 1, 2, 33)
    with pytest.raises(InvalidValue) as info:
        decode(raw, b"key-1", "orders")
    err = info.value
    assert (err.topic, err.key, err.partition, err.offset) == ("orders", "key-1", 2, 33)
    assert "partition 2 offset 33" in str(err)


def test_legacy_bare_json_is_read_with_unknown_origin() -> None:
    assert decode(b'{"old":true}', b"k", "t") == {"old": True}
    assert origin(b'{"old":true}') == (UNKNOWN, UNKNOWN, UNKNOWN)


def test_newer_value_format_is_refused_not_misread() -> None:
    raw = bytearray(pack(b"{}", 1, 0, 5))
    raw[1] = VALUE_FORMAT_VERSION + 1
    with pytest.raises(InvalidValue, match="unknown value format"):
        decode(bytes(raw), b"k", "t")


def test_topic_contract_helpers() -> None:
    assert encode_key("order-é") == "order-é".encode()
    assert encode_value(None) is None
    assert encode_value({"x": 1}) == b'{"x":1}'
    assert format_headers() == [(VALUE_FORMAT_HEADER, str(VALUE_FORMAT_VERSION).encode())]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, VALUE_FORMAT_VERSION),  # no headers: the current format
        ([("other", b"7")], VALUE_FORMAT_VERSION),
        ([(VALUE_FORMAT_HEADER, b"1")], 1),
        ([("other", b"x"), (VALUE_FORMAT_HEADER, b"2")], 2),
        ([(VALUE_FORMAT_HEADER, b"v2")], 255),  # unreadable: no reader understands it
        ([(VALUE_FORMAT_HEADER, b"9999")], 255),
        ([(VALUE_FORMAT_HEADER, None)], 255),
    ],
)
def test_value_format_comes_from_the_record_header(
    headers: list[tuple[str, bytes | None]] | None, expected: int
) -> None:
    assert value_format(headers) == expected


def test_headers_no_loop_could_read_declare_an_unreadable_format_that_says_why() -> None:
    assert value_format(UNREADABLE_HEADERS) == UNREADABLE_FORMAT
    raw = HEADER.pack(1, UNREADABLE_FORMAT, 1, 0, 7) + b"{}"
    with pytest.raises(InvalidValue, match="header names not UTF-8") as info:
        decode(raw, b"k", "t")
    assert (info.value.partition, info.value.offset) == (0, 7)
