"""The cache of decoded values (ValueCache, storage/cache.py) over real RocksDB, no broker:
what it keeps, and that no get ever answers a value older than what the store has applied,
whichever way a write reaches the store, and under concurrent reads and writes."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from globalstore import ValueCache
from globalstore.storage import Record, Storage
from globalstore.storage.cache import NOT_KEPT, HotValues
from globalstore.stores.store import Store
from tests.unit.store_fakes import LikeTheCLoop, OneCopy, batch


def _store(storage: Storage, cache: ValueCache | None = None) -> Store:
    """The queries over `storage`, as a running store's, with the cache `cache`."""
    return Store(OneCopy(storage, "t", cache or ValueCache()))  # type: ignore[arg-type]


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    storage.apply(batch(("a", '{"v": 1}'), ("b", '{"v": 1}')), {}, True, 1)
    yield storage
    storage.close()


def _hot(storage: Storage) -> HotValues:
    assert storage.hot is not None
    return storage.hot


def test_a_second_get_answers_the_kept_object(storage: Storage) -> None:
    store = _store(storage)
    first = store.get("a")
    assert first == {"v": 1}
    assert store.get("a") is first  # from the cache: no lookup, no decode
    assert len(_hot(storage)) == 1
    assert store.get("zz", "absent") == "absent"  # an absent key is not kept
    assert len(_hot(storage)) == 1


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda s, r: s.apply(r, {}, True, 1), id="follow-apply"),
        pytest.param(lambda s, r: s.apply(r, {}, False, 1, list_keys=False), id="bulk-apply"),
        pytest.param(lambda s, r: s.apply_native(LikeTheCLoop(r), 0, 1, True), id="c-follow"),
        pytest.param(lambda s, r: s.apply_native(LikeTheCLoop(r), 0, 1), id="c-bulk"),
    ],
)
def test_every_write_path_replaces_what_it_writes(storage: Storage, write) -> None:  # type: ignore[no-untyped-def]
    store = _store(storage)
    assert store.get("a") == {"v": 1} and store.get("b") == {"v": 1}
    write(storage, batch(("a", '{"v": 2}'), ("b", None), start=2))
    assert store.get("a") == {"v": 2}
    assert store.get("b") is None


def test_a_batch_of_other_keys_leaves_the_kept_value(storage: Storage) -> None:
    store = _store(storage)
    kept = store.get("a")
    storage.apply(batch(("c", "3"), start=2), {}, True, 1)
    assert store.get("a") is kept
    assert store.get("c") == 3


def test_a_rewrite_of_values_and_a_wipe_empty_it(storage: Storage) -> None:
    store = _store(storage)
    store.get("a")
    storage.write_values([(b"a", storage.get(b"a") or b"")])  # a migration's rewrite
    assert len(_hot(storage)) == 0
    store.get("a")
    assert len(_hot(storage)) == 1
    storage.wipe()  # as before a restore from the beginning, or a snapshot's install
    assert len(_hot(storage)) == 0


def test_a_value_past_the_ttl_is_hidden_though_kept(storage: Storage) -> None:
    store = _store(storage)
    now = int(time.time() * 1000)
    fresh: list[Record] = [(*r[:5], now) for r in batch(("t", "1"), start=2)]
    storage.apply(fresh, {}, True, 1)
    assert store.get("t") == 1
    storage.state = dataclasses.replace(storage.state, ttl_ms=60_000)
    assert store.get("t") == 1  # kept, and younger than the ttl
    storage.state = dataclasses.replace(storage.state, ttl_ms=1)
    time.sleep(0.01)
    assert store.get("t") is None  # kept, but past the ttl: hidden as the lookup hides it


def test_bounded_in_entries_and_in_bytes(storage: Storage) -> None:
    keys = [f"k{i}" for i in range(20)]
    storage.apply(batch(*[(k, '"' + "x" * 100 + '"') for k in keys], start=2), {}, True, 1)
    by_entries = _store(storage, ValueCache(entries=5))
    for k in keys:
        by_entries.get(k)
    hot = _hot(storage)
    assert len(hot) == 5
    assert hot.value(b"k19", None) is not NOT_KEPT  # the newest stay
    assert hot.value(b"k0", None) is NOT_KEPT


def test_bounded_in_bytes(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    keys = [f"k{i}" for i in range(20)]
    storage.apply(batch(*[(k, '"' + "x" * 100 + '"') for k in keys]), {}, True, 1)
    store = _store(storage, ValueCache(entries=1000, max_bytes=1000))
    for k in keys:
        assert store.get(k) == "x" * 100
    hot = _hot(storage)
    assert 0 < hot.bytes <= 1000
    assert len(hot) < len(keys)
    storage.close()


def test_a_read_from_before_a_write_is_not_kept() -> None:
    """The race a cache must not lose: a get reads the old value, a write replaces it, then the
    get would keep what it read."""
    hot = HotValues(10, 1 << 20)
    seen = hot.generation
    hot.writing([b"a"])
    hot.keep(b"a", seen, "old", b"old")  # while the write is under way
    hot.written()
    hot.keep(b"a", seen, "old", b"old")  # after it
    assert hot.value(b"a", None) is NOT_KEPT
    during = hot.generation - 1  # what a get that began during the write noted: odd
    hot.keep(b"a", during, "old", b"old")
    assert hot.value(b"a", None) is NOT_KEPT
    hot.keep(b"a", hot.generation, "new", b"new")
    assert hot.value(b"a", None) == "new"


def test_a_secondary_instance_sees_the_writers_values_after_each_catch_up(
    tmp_path: Path,
) -> None:
    """A SharedStore reader: it does not see which keys the writer wrote, so a catch-up
    empties its cache."""
    writer = Storage(tmp_path / "s")
    writer.initialise("t", None, 1)
    writer.apply(batch(("a", "1")), {}, True, 1)
    reader = Storage(tmp_path / "s", secondary=tmp_path / "work")
    reader.load(reader.read_meta())
    store = _store(reader)
    try:
        assert store.get("a") == 1
        writer.apply(batch(("a", "2"), start=1), {}, True, 1)
        reader.catch_up()
        assert store.get("a") == 2
        assert store.get("a") == 2  # kept again
        assert len(_hot(reader)) == 1
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("listed", [True, False], ids=["keys-listed", "keys-unlisted"])
def test_reads_under_a_rewriting_writer_follow_the_offset_order(
    tmp_path: Path, listed: bool
) -> None:
    """A writer sets every key of a small hot set to version v, v = 1, 2, ..., one batch per
    version at offsets v*n .. v*n+n-1. Three reader threads get the keys in a loop; each
    read is checked against the position published before it began (its value can be no
    older than the batch that position covers) and against the writer's progress after it
    ended (no newer than the batch under way), and a reader never sees a key go back."""
    storage = Storage(tmp_path / "s")
    storage.initialise("t", None, 1)
    keys = [f"k{i:02d}" for i in range(16)]
    n = len(keys)
    storage.apply(batch(*[(k, "0") for k in keys]), {}, True, 1)
    store = _store(storage)
    hits = _counting_hits(_hot(storage))
    stop = threading.Event()
    under_way = [0]  # the version the writer is writing or has written
    failures: list[str] = []
    reads = [0]

    def writer() -> None:
        v = 0
        while not stop.is_set() and v < 3000:
            v += 1
            under_way[0] = v
            records = batch(*[(k, str(v)) for k in keys], start=v * n)
            if listed:
                storage.apply(records, {}, True, 1)
            else:
                storage.apply(records, {}, False, 1, list_keys=False)
        stop.set()

    def reader() -> None:
        last = dict.fromkeys(keys, 0)
        count = 0
        while not stop.is_set():
            for k in keys:
                applied = storage.state.positions.get(0, 0) // n - 1
                got = store.get(k)
                newest = under_way[0]
                if not applied <= got <= newest or got < last[k]:
                    failures.append(f"{k}: {got} outside [{applied}, {newest}], last {last[k]}")
                    stop.set()
                last[k] = got
                count += 1
        reads[0] += count

    _run_together(writer, [reader] * 3)
    storage.close()
    assert not failures, failures[:5]
    assert under_way[0] >= 1000  # the writer did rewrite the keys many times
    assert reads[0] > 10_000
    assert len(hits) > 1000  # and many of them came from the cache


def _counting_hits(hot: HotValues) -> list[int]:
    """A list that grows by one at each get the cache answers."""
    answer, hits = hot.value, []

    def counted(key: bytes, ttl_ms: int | None) -> object:
        value = answer(key, ttl_ms)
        if value is not NOT_KEPT:
            hits.append(1)
        return value

    hot.value = counted  # type: ignore[method-assign]
    return hits


def _run_together(writer: Callable[[], None], readers: list[Callable[[], None]]) -> None:
    """Run `writer` and the `readers` in threads until the writer is done and the readers
    have seen `stop` (which the writer sets). Threads hand the interpreter over often, so
    that writes land between a get's lookup and its keep (with the default interval,
    seldom)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads = [threading.Thread(target=r) for r in readers]
    try:
        for t in threads:
            t.start()
        writer()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(interval)
