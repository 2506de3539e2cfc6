"""Values that do not decode, over a real store directory (no broker): every scan leaves
them out and reports them (the caller's on_invalid, else a WARNING once per record), never
ends on one; get() of such a key still raises InvalidValue naming its record."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from globalstore import ConversionFailed, InvalidValue, ReadOnlyStore
from globalstore.codec import HEADER, LAYOUT_VERSION
from globalstore.storage import Storage
from tests.unit.read.test_arrow import _raw_values
from tests.unit.shaping.test_indexes import _open, _v, _View
from tests.unit.store_fakes import batch

_GOOD = {"a": 1, "c": {"n": 3}, "e": 5}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """a, c, e decode; b is not JSON (offset 1); d declares a value format 9 (offset 3)."""
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    records = batch(("a", "1"), ("b", "not json {"), ("c", '{"n": 3}'))
    records += batch(("d", "4"), fmt=9, start=3) + batch(("e", "5"), start=4)
    storage.apply(records, {}, True, 1)
    storage.close()
    return tmp_path / "s"


@pytest.fixture
def store(path: Path) -> Iterator[ReadOnlyStore]:
    with ReadOnlyStore(path) as store:
        yield store


def _where(errors: list[InvalidValue]) -> list[tuple[str, int, int, str]]:
    return [(e.key, e.partition, e.offset, e.reason.split(":")[0]) for e in errors]


BAD = [("b", 0, 1, "not valid JSON"), ("d", 0, 3, "unknown value format")]


def test_every_scan_leaves_the_bad_values_out_and_reports_each(store: ReadOnlyStore) -> None:
    errors: list[InvalidValue] = []
    assert dict(store.items(on_invalid=errors.append)) == _GOOD
    assert _where(errors) == BAD
    errors.clear()
    assert list(store.items(reverse=True, on_invalid=errors.append)) == list(
        reversed(_GOOD.items())
    )
    assert _where(errors) == list(reversed(BAD))
    errors.clear()
    assert list(store.values(on_invalid=errors.append)) == list(_GOOD.values())
    assert _where(errors) == BAD
    errors.clear()
    entries = list(store.entries(on_invalid=errors.append))
    assert [(e.key, e.value, e.offset) for e in entries] == [
        ("a", 1, 0),
        ("c", {"n": 3}, 2),
        ("e", 5, 4),
    ]
    assert _where(errors) == BAD
    assert list(store.keys()) == ["a", "b", "c", "d", "e"]  # keys are never decoded


def test_a_limit_counts_the_keys_visited_bad_ones_included(store: ReadOnlyStore) -> None:
    errors: list[InvalidValue] = []
    assert list(store.items(limit=2, on_invalid=errors.append)) == [("a", 1)]
    assert _where(errors) == BAD[:1]


def test_get_of_a_bad_key_still_raises_naming_its_record(store: ReadOnlyStore) -> None:
    with pytest.raises(InvalidValue) as info:
        store.get("b")
    assert (info.value.topic, info.value.partition, info.value.offset) == ("t", 0, 1)
    assert store.get("c") == {"n": 3}


def test_without_on_invalid_a_warning_names_each_record_once(
    store: ReadOnlyStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "globalstore.read.skipped")
    for _ in range(3):
        assert dict(store.items()) == _GOOD
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    assert "key 'b' in topic 't' partition 0 offset 1: not valid JSON" in warned[0]
    assert "offset 3: unknown value format" in warned[1]
    assert str(store.path) in warned[0]
    repeated = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(repeated) == 4  # the later scans still say so, below WARNING


def test_an_on_invalid_that_raises_ends_the_scan_with_its_own_error(
    store: ReadOnlyStore,
) -> None:
    class StopError(Exception):
        pass

    def stop(exc: InvalidValue) -> None:
        raise StopError(exc.key)

    seen: list[Any] = []
    with pytest.raises(StopError, match=r"^b$"):
        for item in store.items(on_invalid=stop):
            seen.append(item)
    assert seen == [("a", 1)]


def test_a_value_a_converter_raises_on_is_left_out_and_reported(path: Path) -> None:
    def to_v2(value: Any) -> Any:
        if value == 5:
            raise ValueError("five has no format 2 form")
        return {"v2": value}

    errors: list[InvalidValue] = []
    with ReadOnlyStore(path, value_format=2, converters={1: to_v2}) as store:
        assert dict(store.items(on_invalid=errors.append)) == {
            "a": {"v2": 1},
            "c": {"v2": {"n": 3}},
        }
    assert [e.key for e in errors] == ["b", "d", "e"]
    assert isinstance(errors[2], ConversionFailed) and "five has no" in errors[2].reason


def test_find_leaves_out_an_indexed_key_whose_value_turned_bad(tmp_path: Path) -> None:
    """An index entry whose value no longer decodes (a reader with other converters, a
    value written by hand): reported with the index value that led there."""
    storage, _ = _open(tmp_path / "s")
    records = [(k, _v(courier)) for k, courier in [("k1", "c-1"), ("k2", "c-1"), ("k3", "c-2")]]
    storage.apply(batch(*records), {}, True, 1)
    storage.close()
    _raw_values(tmp_path / "s", [(b"k2", HEADER.pack(LAYOUT_VERSION, 1, 9, 0, 1) + b"{")])
    storage, _ = _open(tmp_path / "s")
    view = _View(storage)
    try:
        errors: list[InvalidValue] = []
        assert [k for k, _ in view.find("by_courier", "c-1", on_invalid=errors.append)] == ["k1"]
        assert [(e.key, e.offset, e.index_value) for e in errors] == [("k2", 1, "c-1")]
        errors.clear()
        matches = view.find_matches("by_courier", prefix="c", on_invalid=errors.append)
        assert [(iv, k) for iv, k, _ in matches] == [("c-1", "k1"), ("c-2", "k3")]
        assert [e.index_value for e in errors] == ["c-1"]
        # What a page cursor does: continue past the reported one.
        after = view.find_matches("by_courier", prefix="c", after=("c-1", "k2"))
        assert [k for _, k, _ in after] == ["k3"]
    finally:
        view.close()
