"""The quarantine on a real RocksDB: a record whose value does not decode is held apart in the
batch of its offset, its key keeps what it held, and a later valid record or tombstone of
the key takes it out; both loops' put (the Python fill and a C-loop-like caller) alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore.codec import HEADER_SIZE
from globalstore.converters import ValueFormats
from globalstore.storage import Storage
from globalstore.storage.quarantine import Quarantine, Quarantined, checker, held
from tests.unit.store_fakes import LikeTheCLoop, batch


def quarantining(storage: Storage, formats: ValueFormats | None = None) -> Storage:
    keys = [q.key.encode() for q in held(storage.meta_items)]
    formats = formats or ValueFormats()
    storage.quarantine = Quarantine(checker(formats, "t"), keys, formats.plain)
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
    assert applied.present == {}  # neither key changed
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
    assert applied.present == {b"d": True, b"e": True}
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


def test_the_c_loops_put_is_checked_alike(storage: Storage) -> None:
    storage.apply_native(LikeTheCLoop(batch(("a", "1"), ("b", "x"), ("c", "x"))), 0, 1)
    storage.apply_native(LikeTheCLoop(batch(("c", None), start=3)), 0, 2)
    assert [(q.key, q.offset) for q in listed(storage)] == [("b", 1)]
    assert storage.state.quarantined == 1 and storage.get(b"b") is None
    assert storage.state.positions == {0: 4}


class PastTheCheckLikeTheCLoop(LikeTheCLoop):
    """The C loop of a quarantining store: a value it finds certainly JSON, of a key neither
    held nor changed in the batch, goes to the unchecked put."""

    def fill(self, put, delete, nexts, skipped, timeout, checked=None) -> int:  # type: ignore[no-untyped-def]
        assert checked is not None
        unchecked, held, changes = checked
        self.unchecked = 0

        def put_like_c(key: bytes, raw: bytes) -> object:
            if _is_json(raw[HEADER_SIZE:]) and key not in held and key not in changes:
                self.unchecked += 1
                return unchecked(key, raw)
            return put(key, raw)

        return super().fill(put_like_c, delete, nexts, skipped, timeout)


def test_values_taken_past_the_check_leave_the_quarantine_as_checked_ones_do(
    storage: Storage,
) -> None:
    first = PastTheCheckLikeTheCLoop(batch(("a", "{"), ("b", "1"), ("c", "{"), ("c", "2")))
    storage.apply_native(first, 0, 1)
    second = PastTheCheckLikeTheCLoop(batch(("a", "3"), ("d", "4"), start=4))
    storage.apply_native(second, 0, 2)
    assert (first.unchecked, second.unchecked) == (1, 1)  # b, then d
    assert listed(storage) == [] and storage.state.quarantined == 0
    assert [storage.get(k) is not None for k in (b"a", b"b", b"c", b"d")] == [True] * 4


def _is_json(value: bytes) -> bool:
    """What the C loop's check says of a value (sound: never more than orjson accepts)."""
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True
