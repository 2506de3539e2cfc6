"""The quarantine on a real RocksDB: a record whose value does not decode is held apart in the
batch of its offset, its key keeps what it held, and a later valid record or tombstone of
the key takes it out; both loops' put (the Python fill and a C-loop-like caller) alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from globalstore.codec import HEADER, LAYOUT_VERSION
from globalstore.converters import ValueFormats
from globalstore.storage import Storage
from globalstore.storage.quarantine import Quarantine, Quarantined, checker, held
from globalstore.storage.records import Delete, Put
from tests.unit.store_fakes import batch


def quarantining(storage: Storage, formats: ValueFormats | None = None) -> Storage:
    keys = [q.key.encode() for q in held(storage.meta_items)]
    storage.quarantine = Quarantine(checker(formats or ValueFormats(), "t"), keys)
    return storage


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path / "db")
    s.initialise("t", None, 1)
    yield quarantining(s)
    s.close()


def listed(storage: Storage) -> list[Quarantined]:
    return list(held(storage.meta_items))


def test_a_bad_value_is_held_apart_and_its_key_keeps_its_value(
    storage: Storage, tmp_path: Path
) -> None:
    storage.apply(batch(("a", '{"x":1}'), ("b", '{"x":2}')), {}, True, 1)
    applied = storage.apply(batch(("a", "not json {"), ("c", "{"), start=2), {}, True, 2)
    assert (storage.get(b"a") or b"").endswith(b'{"x":1}')
    assert storage.get(b"c") is None
    assert applied.changed == {}  # neither key changed
    assert storage.state.count == 2 and storage.state.quarantined == 2
    assert storage.state.positions == {0: 4}
    [a, c] = listed(storage)
    assert (a.key, a.partition, a.offset, a.timestamp, a.value) == ("a", 0, 2, 1_000, b"not json {")
    assert a.reason.startswith("not valid JSON") and c.key == "c"
    storage.close()

    reopened = Storage(tmp_path / "db")
    assert reopened.read_meta().quarantined == 2 and len(listed(reopened)) == 2
    reopened.close()


def test_a_later_valid_record_or_tombstone_takes_the_key_out(storage: Storage) -> None:
    storage.apply(batch(("a", "{"), ("b", "{"), ("c", "{")), {}, True, 1)
    assert storage.state.quarantined == 3
    storage.apply(batch(("a", '{"ok":1}'), ("b", None), start=3), {}, True, 2)
    assert [q.key for q in listed(storage)] == ["c"] and storage.state.quarantined == 1
    # In one batch: bad then good leaves it out; good then bad holds the bad, the good stored.
    applied = storage.apply(
        batch(("d", "{"), ("d", "1"), ("e", "2"), ("e", "{"), start=5), {}, True, 3
    )
    assert [q.key for q in listed(storage)] == ["c", "e"] and storage.state.quarantined == 2
    assert applied.changed == {b"d": True, b"e": True}
    assert storage.state.count == 3  # a, d, e


def test_a_converter_that_raises_quarantines(tmp_path: Path) -> None:
    def fails(value: Any) -> Any:
        raise ValueError("no")

    storage = Storage(tmp_path / "db")
    storage.initialise("t", None, 1)
    quarantining(storage, ValueFormats(2, {1: fails}))
    storage.apply(batch(("a", '{"x":1}'), fmt=1), {}, True, 1)
    [a] = listed(storage)
    assert "converter from value format 1 failed" in a.reason
    storage.close()


class NativeLike:
    """What the C loop does with one batch: put(key, stored bytes) per record."""

    def __init__(self, records: list[tuple[bytes, bytes | None, int]]) -> None:
        self.records = records

    def fill(
        self,
        put: Put,
        delete: Delete,
        nexts: dict[int, int],
        events: list[Any],
        skipped: list[tuple[int, int, bytes]],
        timeout: float,
    ) -> int:
        for key, value, offset in self.records:
            if value is None:
                delete(key)
            else:
                put(key, HEADER.pack(LAYOUT_VERSION, 1, 7, 0, offset) + value)
            nexts[0] = offset + 1
        return len(self.records)


def test_the_c_loops_put_is_checked_alike(storage: Storage) -> None:
    storage.apply_native(NativeLike([(b"a", b"1", 0), (b"b", b"x", 1), (b"c", b"x", 2)]), 0, 1)
    storage.apply_native(NativeLike([(b"c", None, 3)]), 0, 2)
    assert [(q.key, q.offset) for q in listed(storage)] == [("b", 1)]
    assert storage.state.quarantined == 1 and storage.get(b"b") is None
    assert storage.state.positions == {0: 4}
