"""A bulk restore into a store that was empty when it began reads the old values of the keys
it has written before only (index_defs.SecondaryIndexes, KeyFilter), and writes every
entry a store built the slow way (every key looked up, exact applies) writes: keys written
again in a later batch and in the same one, index values that move, keys deleted, values
that are not JSON, on both loops."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from globalstore.storage import Storage
from globalstore.storage._entries import KeyFilter
from tests.unit.shaping.test_fields import DECLARED, FUNCTIONS, _entries, _value
from tests.unit.shaping.test_indexes import _open
from tests.unit.store_fakes import LikeTheCLoop, batch


class _Lookups:
    """Counts the keys whose values before a batch a storage's indexes read: stored values
    (with a multi-get, a bulk restore's, or one get each), or the reverse entries of an
    index that keeps them."""

    def __init__(self, storage: Storage) -> None:
        index = storage.index
        assert index is not None
        self.keys = 0
        storage.get_many = self._counting(storage.get_many)  # type: ignore[method-assign]
        index.get_many = self._counting(index.get_many)  # type: ignore[method-assign]
        index.get_each = self._counting(index.get_each)  # type: ignore[method-assign]
        get = storage.get

        def get_counted(key: bytes) -> bytes | None:
            self.keys += 1
            return get(key)

        storage.get = get_counted  # type: ignore[method-assign]

    def _counting(
        self, read: Callable[[list[bytes]], list[bytes | None]]
    ) -> Callable[[list[bytes]], list[bytes | None]]:
        def counted(keys: list[bytes]) -> list[bytes | None]:
            self.keys += len(keys)
            return read(keys)

        return counted


def _bulk(storage: Storage, records: list[tuple[str, str | None]], start: int, i: int) -> None:
    got = batch(*records, start=start)
    if i % 2:
        storage.apply_native(LikeTheCLoop(got), 0, i)
    else:
        storage.apply(got, {}, False, i)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("indexes", [DECLARED, FUNCTIONS], ids=["declared", "functions"])
def test_a_fresh_bulk_restore_writes_the_entries_of_the_slow_way(
    tmp_path: Path, seed: int, indexes: dict[str, object]
) -> None:
    rng = random.Random(seed)
    fresh, _ = _open(tmp_path / "fresh", indexes)
    slow, _ = _open(tmp_path / "slow", indexes)
    lookups = _Lookups(fresh)
    start, written = 0, 0
    for i in range(16):
        # 60 keys, up to 40 records a batch: keys repeat within a batch and across batches.
        records = [(f"k{rng.randrange(60)}", _value(rng)) for _ in range(rng.randrange(1, 40))]
        _bulk(fresh, records, start, i)
        slow.apply(batch(*records, start=start), {}, True, i)
        start += len(records)
        written += len({key for key, _ in records})
        assert _entries(fresh) == _entries(slow), i
        assert fresh.state.index_entries == slow.state.index_entries
    assert len(_entries(fresh)) > 50
    # Only the keys written in an earlier batch were looked up (and a few the filter took
    # for one): fewer than every key, but some.
    assert 0 < lookups.keys < written
    # An exact apply (the restore is over) reads every key's old value for the count, and
    # the indexes take them from there: no read of theirs.
    before = lookups.keys
    fresh.apply(batch(("k1", '{"customer": "x"}'), start=start), {}, True, 99)
    assert lookups.keys == before
    fresh.close()
    slow.close()


def test_a_bulk_restore_into_a_store_holding_keys_looks_every_key_up(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", DECLARED)
    storage.apply(batch(("k1", '{"customer": "a"}')), {}, True, 1)  # resumed: not empty
    lookups = _Lookups(storage)
    storage.apply(batch(("k1", '{"customer": "b"}'), ("k2", None), start=1), {}, False, 2)
    assert lookups.keys == 2  # one read of the old values for both indexes
    assert [e for e in _entries(storage) if e.startswith(b"e")] == [
        b"e\x00\x00\x00\x01b\x00k1"
    ]  # a's entry went
    storage.close()


def test_a_wiped_store_is_fresh_again(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", DECLARED)
    storage.apply(batch(("k1", '{"customer": "a"}')), {}, False, 1)
    storage.wipe()
    storage.initialise("t", None, 1)  # prepared again, as after a rebuild
    storage.load(storage.read_meta())
    storage.define(bulk=True, now_ms=1)
    lookups = _Lookups(storage)
    storage.apply(batch(("k1", '{"customer": "a"}')), {}, False, 1)
    assert lookups.keys == 0
    storage.close()


def test_the_key_filter_never_misses_a_key_it_was_given() -> None:
    keys = [f"key-{i}".encode() for i in range(300_000)]  # several layers
    seen = KeyFilter()
    taken = sum(len(seen.seen_then_add(keys[n : n + 10_000])) for n in range(0, len(keys), 10_000))
    assert taken < 0.03 * len(keys)  # none was given before: about 1 % taken for one
    assert seen.seen_then_add(keys) == list(range(len(keys)))
    others = [f"other-{i}".encode() for i in range(100_000)]
    assert len(seen.seen_then_add(others)) < 3_000  # about 1 % taken for one given
    assert seen.nbytes() < 2.5 * len(keys)
