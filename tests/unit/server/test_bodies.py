"""A page of the HTTP API: bounded in items and in bytes, with the cursor where it stopped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from globalstore.server.bodies import page
from globalstore.server.params import cursor


class _Scan:
    """(key, value) pairs, recording whether the reader closed the scan."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs
        self.closed = False

    def items(self) -> Iterator[tuple[str, Any]]:
        try:
            yield from self.pairs
        finally:
            self.closed = True


def _read(scan: _Scan, limit: int, max_bytes: int) -> tuple[list[str], str | None]:
    body = orjson.loads(page(scan.items(), limit, max_bytes))
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
