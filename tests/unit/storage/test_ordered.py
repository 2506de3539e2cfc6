"""A batch's values are written in key order (_ordered.KeyOrder): the batch's outcome is the
same as writing them in the order they came, two writes of one key keep their order, and a
write that fails fails the batch."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from globalstore.codec import HEADER_SIZE
from globalstore.storage import Storage
from globalstore.storage._ordered import KeyOrder
from globalstore.storage.records import Record


def test_writes_come_out_sorted_by_key_and_in_order_within_a_key() -> None:
    out: list[tuple[bytes, bytes | None]] = []
    order = KeyOrder(lambda k, v: out.append((k, v)), lambda k: out.append((k, None)))
    order.put(b"b", b"1")
    order.delete(b"a")
    order.put(b"ab", b"2")
    order.put(b"a", b"3")
    order.put(b"b", b"4")
    order.delete(b"b")
    order.put(b"", b"5")
    assert order.flush() == 7
    assert out == [
        (b"", b"5"),
        (b"a", None),
        (b"a", b"3"),
        (b"ab", b"2"),
        (b"b", b"1"),
        (b"b", b"4"),
        (b"b", None),
    ]
    assert order.flush() == 0  # nothing is kept after a flush


def test_a_failing_write_fails_the_flush_and_nothing_stays_kept() -> None:
    written: list[bytes] = []

    def put(key: bytes, value: bytes) -> None:
        if key == b"c":
            raise OSError("disk full")
        written.append(key)

    order = KeyOrder(put, written.append)
    for key in (b"d", b"c", b"a"):
        order.put(key, b"v")
    with pytest.raises(OSError, match="disk full"):
        order.flush()
    assert written == [b"a"]
    assert order.flush() == 0


def test_only_bytes_are_kept() -> None:
    order = KeyOrder(lambda k, v: None, lambda k: None)
    with pytest.raises(TypeError):
        order.put("a", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        order.put(b"a", 1)  # type: ignore[arg-type]


def test_a_shuffled_batch_with_rewrites_and_deletes_ends_as_applied_in_order(
    tmp_path: Path,
) -> None:
    rng = random.Random(7)
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    storage.load(storage.read_meta())
    model: dict[bytes, bytes] = {}
    offset = 0
    for _ in range(5):
        batch: list[Record] = []
        for _ in range(2_000):
            key = b"k%03d" % rng.randrange(300)  # many keys written twice in a batch
            value = None if rng.random() < 0.2 else b'{"n": %d}' % offset
            batch.append((key, value, None, 0, offset, 1_000))
            offset += 1
        storage.apply(batch, {}, rng.random() < 0.5, 2_000)
        for key, value, *_ in batch:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
    stored = dict(storage.scan(None, None, False))
    assert {k: v[HEADER_SIZE:] for k, v in stored.items()} == model
    assert storage.state.positions == {0: offset}
