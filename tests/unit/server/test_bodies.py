"""A page of the HTTP API: bounded in items and in bytes, with the cursor where it stopped;
the values its scan leaves out listed under `invalid`, counted, and passed by the cursor; an
export that reports them in line and goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from globalstore.codec import OnInvalid
from globalstore.errors import InvalidValue
from globalstore.server.bodies import ndjson_chunks, page
from globalstore.server.params import cursor


class _Scan:
    """(key, value) pairs, or values a store's scan would leave out (InvalidValue: given to
    its on_invalid), recording whether the reader closed the scan and the errors counted."""

    def __init__(self, pairs: list[tuple[str, Any] | InvalidValue]) -> None:
        self.pairs = pairs
        self.closed = False
        self.counted = 0

    def items(self, report: OnInvalid) -> Iterator[tuple[str, Any]]:
        try:
            for pair in self.pairs:
                if isinstance(pair, InvalidValue):
                    report(pair)
                else:
                    yield pair
        finally:
            self.closed = True

    def count(self) -> None:
        self.counted += 1


def _bad(key: str, offset: int) -> InvalidValue:
    return InvalidValue("t", key.encode(), 0, offset, "not valid JSON: nope")


def _page(scan: _Scan, limit: int, max_bytes: int) -> Any:
    return orjson.loads(page(scan.items, limit, max_bytes, scan.count))


def _read(scan: _Scan, limit: int, max_bytes: int) -> tuple[list[str], str | None]:
    body = _page(scan, limit, max_bytes)
    after = None if body["cursor"] is None else cursor({"cursor": body["cursor"]})
    return [item["key"] for item in body["items"]], after


def _items_bytes(pairs: list[tuple[str, Any]]) -> int:
    """The bytes of the items in a page's JSON array, commas between them included."""
    return sum(len(orjson.dumps({"key": k, "value": v})) for k, v in pairs) + len(pairs) - 1


def test_a_page_stops_at_the_limit_and_its_cursor_is_its_last_key() -> None:
    scan = _Scan([(f"k{i}", i) for i in range(5)])
    assert _read(scan, 3, 1 << 20) == (["k0", "k1", "k2"], "k2")
    assert scan.closed


def test_a_page_stops_before_the_item_that_would_pass_the_byte_cap() -> None:
    pairs = [(f"k{i}", "x" * 100) for i in range(10)]
    three = _items_bytes(pairs[:3])
    scan = _Scan(pairs)
    assert _read(scan, 100, three) == (["k0", "k1", "k2"], "k2")
    assert scan.closed
    assert _read(_Scan(pairs), 100, three - 1) == (["k0", "k1"], "k1")


def test_an_item_bigger_than_the_cap_comes_alone_and_the_last_page_has_no_cursor() -> None:
    pairs = [("big", "x" * 1000), ("small", 1)]
    assert _read(_Scan(pairs), 100, 10) == (["big"], "big")
    assert _read(_Scan(pairs[1:]), 100, 10) == (["small"], None)
    assert _read(_Scan([]), 100, 10) == ([], None)


def test_values_left_out_are_listed_counted_and_passed_by_the_cursor() -> None:
    scan = _Scan([("a", 1), _bad("b", 1), ("c", 3), _bad("d", 4), ("e", 5)])
    body = _page(scan, 100, 1 << 20)
    assert [item["key"] for item in body["items"]] == ["a", "c", "e"]
    assert body["invalid"] == [
        {"key": "b", "partition": 0, "offset": 1, "reason": "not valid JSON: nope"},
        {"key": "d", "partition": 0, "offset": 4, "reason": "not valid JSON: nope"},
    ]
    assert body["cursor"] is None and scan.counted == 2 and scan.closed
    # A page holds `limit` entries of both kinds; its cursor is past the last of either.
    assert _read(_Scan([("a", 1), _bad("b", 1), ("c", 3)]), 2, 1 << 20) == (["a"], "b")
    assert _read(_Scan([_bad("b", 1), _bad("d", 4), ("e", 5)]), 2, 1 << 20) == ([], "d")


def test_a_value_left_out_that_does_not_fit_waits_for_the_next_page() -> None:
    scan = _Scan([("a", 1), ("c", 3), _bad("d", 4), ("e", 5)])
    body = _page(scan, 2, 1 << 20)
    assert [item["key"] for item in body["items"]] == ["a", "c"] and body["invalid"] == []
    assert cursor({"cursor": body["cursor"]}) == "c"
    assert scan.counted == 0 and scan.closed  # counted by the page that lists it


def test_an_export_reports_a_value_left_out_in_line_and_goes_on() -> None:
    scan = _Scan([("a", 1), _bad("b", 1), ("c", 3), ("e", 5)])
    lines = [orjson.loads(line) for chunk in ndjson_chunks(scan.items, 2, scan.count)
             for line in chunk.splitlines()]  # fmt: skip
    assert lines == [
        {"key": "a", "value": 1},
        {
            "error": "InvalidValue: invalid value for key 'b' in topic 't' partition 0 "
            "offset 1: not valid JSON: nope",
            "key": "b",
            "partition": 0,
            "offset": 1,
            "reason": "not valid JSON: nope",
        },
        {"key": "c", "value": 3},
        {"key": "e", "value": 5},
    ]
    assert scan.counted == 1 and scan.closed
