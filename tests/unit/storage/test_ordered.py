"""A batch's values are written in key order (_ordered.KeyOrder): straight through while the
keys come in order, the rest kept and written sorted. The batch's outcome is the same as
writing them in the order they came, two writes of one key keep their order, and a write that
fails fails the batch."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from globalstore.codec import HEADER_SIZE
from globalstore.storage import Storage
from globalstore.storage._ordered import KeyOrder
from globalstore.storage.batch import ValueOrder
from globalstore.storage.records import Record


def _in_key_order(keys: list[bytes]) -> list[bytes]:
    """What KeyOrder writes for `keys`: the run in order from the first, then the rest
    sorted (stably: two writes of one key in the order they came)."""
    run = 1
    while run < len(keys) and keys[run - 1] <= keys[run]:
        run += 1
    return keys[:run] + sorted(keys[run:])


def test_keys_in_order_go_straight_through() -> None:
    out: list[bytes] = []
    order = KeyOrder(lambda k, v: out.append(k), out.append)
    for key in (b"a", b"a", b"b", b"ba", b"c"):
        order.put(key, b"v")
    assert out == [b"a", b"a", b"b", b"ba", b"c"]  # before any flush
    assert order.flush() == (5, 0)


def test_from_the_first_key_out_of_order_the_writes_are_kept_and_sorted() -> None:
    out: list[tuple[bytes, bytes | None]] = []
    order = KeyOrder(lambda k, v: out.append((k, v)), lambda k: out.append((k, None)))
    order.put(b"b", b"1")
    order.delete(b"a")
    order.put(b"ab", b"2")
    order.put(b"a", b"3")
    order.put(b"b", b"4")
    order.delete(b"b")
    order.put(b"", b"5")
    assert out == [(b"b", b"1")]
    assert order.flush() == (7, 3)  # breaks: a after b, a after ab, "" after b
    assert out == [
        (b"b", b"1"),
        (b"", b"5"),
        (b"a", None),
        (b"a", b"3"),
        (b"ab", b"2"),
        (b"b", b"4"),
        (b"b", None),
    ]
    order.put(b"z", b"6")  # a flushed KeyOrder starts again, as new
    assert out[-1] == (b"z", b"6")


def test_any_keys_come_out_in_byte_order() -> None:
    # Keys sharing long prefixes (past the 24 bytes KeyOrder copies), one another's
    # prefixes, zero bytes, the empty key.
    rng = random.Random(3)
    for _ in range(300):
        prefix = bytes(rng.choice(b"\x00ab") for _ in range(rng.randrange(40)))
        keys = [
            prefix + bytes(rng.choice(b"\x00\x01ab\xff") for _ in range(rng.randrange(12)))
            for _ in range(rng.randrange(1, 40))
        ]
        out: list[bytes] = []
        order = KeyOrder(lambda k, v, out=out: out.append(k), out.append)
        for key in keys:
            order.put(key, b"")
        order.flush()
        assert out == _in_key_order(keys)


def test_not_sorting_it_writes_as_they_come_and_counts_the_breaks() -> None:
    out: list[bytes] = []
    order = KeyOrder(lambda k, v: out.append(k), out.append, sorting=False)
    for key in (b"b", b"a", b"c", b"c", b"a"):
        order.put(key, b"v")
    assert out == [b"b", b"a", b"c", b"c", b"a"]
    assert order.flush() == (5, 2)


def test_a_batch_of_long_runs_makes_the_next_go_in_as_it_comes() -> None:
    order = ValueOrder()
    assert order.sorting  # the first batch sorts
    assert order.looks()
    order.learn(10_000, 5)  # six partitions' keys, each in order
    assert not order.sorting
    looked = [order.looks() for _ in range(32)]  # one batch in 16 counts its order again
    assert looked.count(True) == 2 and looked[15] and looked[31]
    order.learn(10_000, 5_000)  # keys in any order
    assert order.sorting and order.looks()


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
    assert written == [b"d", b"a"]
    assert order.flush() == (0, 0)


def test_only_bytes_are_taken() -> None:
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
