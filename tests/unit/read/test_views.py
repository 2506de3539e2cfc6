"""Views (store.view()) without a broker, on real RocksDB: several reads over one instant
while batches are applied, a view as of a time (the same answers as a replay), the versions
a view keeps across a purge, a view held across swaps of the copy, its close, and reads of
an index as of a time answered from the versions."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from rocksdict import DbClosedError

from globalstore import HistoryUnavailable, ReadOnlyStore, StoreClosed
from globalstore.aio import AsyncReadOnlyStore
from globalstore.converters import ValueFormats
from globalstore.read.copy import Copy
from globalstore.read.view import Viewable
from globalstore.replicas.live import Live
from globalstore.storage import Storage
from tests.unit.read.test_as_of import WINDOW_MS, _rec, _replay, _written
from tests.unit.read.test_as_of import _open as _open_history
from tests.unit.shaping.test_indexes import TOPIC, _open, _v, _View


def _courier(key: str, courier: str, p: int, o: int, ts: int = 1_000) -> Any:
    return (key.encode(), _v(courier).encode(), None, p, o, ts)


def test_a_view_reads_one_instant_while_batches_are_applied(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.apply([_courier("a", "c1", 0, 0), _courier("b", "c2", 0, 1)], {}, True, 1)
    store = _View(storage)
    before = dict(store.items())
    with store.view() as view:
        assert view.as_of is None
        storage.apply([_courier("a", "c2", 0, 2), (b"b", None, None, 0, 3, 2_000)], {}, True, 1)
        storage.apply([_courier("c", "c1", 0, 4)], {}, True, 1)
        # The store moved on; every read of the view still sees the instant it was taken.
        assert store.get("a") != before["a"] and "b" not in store and store.count() == 2
        assert dict(view.items()) == before and view.count() == 2
        assert view.get("a") == view["a"] == before["a"] and "b" in view and "c" not in view
        assert view.get_many(["a", "b", "c"]) == before
        assert list(view.keys(reverse=True)) == ["b", "a"]
        entry = view.get_entry("a")
        assert entry is not None and entry.offset == 0
        assert [e.key for e in view.entries()] == ["a", "b"]
        assert dict(view.find("by_courier", "c1")) == {"a": before["a"]}
        assert view.find_count("by_courier", "c2") == 1
        assert list(view.find_matches("by_courier", prefix="c")) == [
            ("c1", "a", before["a"]),
            ("c2", "b", before["b"]),
        ]
        assert view.to_arrow().read_all().column("key").to_pylist() == ["a", "b"]
    assert dict(store.find("by_courier", "c1")) == {"c": store.get("c")}
    for read in (lambda: view.get("a"), lambda: list(view.items()), lambda: "a" in view):
        with pytest.raises(StoreClosed, match="closed"):
            read()
    view.close()  # idempotent
    storage.close()


def test_a_view_as_of_a_time_answers_as_a_replay_does(tmp_path: Path) -> None:
    rng = random.Random(46)
    storage, records = _written(tmp_path / "s", rng, 300, moves=True)
    store, keys = _View(storage), sorted({r[0].decode() for r in records if r[0] is not None})
    for t in [rng.randrange(900, 3_200) for _ in range(25)] + [10**12]:
        want = {k: v for k in keys if (v := _replay(records, k, t)) is not None}
        with store.view(as_of=t / 1000) as view:
            assert view.as_of == t / 1000
            assert dict(view.items()) == want and view.get_many(keys) == want
            assert {k: view.get(k) for k in keys if k in view} == want
            assert list(view.keys(reverse=True)) == sorted(want, reverse=True)
            assert view.count() == len(want)
            assert [e.value for e in view.entries()] == [want[k] for k in sorted(want)]
            # A read naming another time answers as of that one, from the same instant.
            assert dict(view.items(as_of=10**9)) == dict(store.items(as_of=10**9))
            # Walks of one view interleave (they share one iterator made at the instant).
            walked = []
            for key, value in view.items(reverse=True):
                assert view.get(key) == value and dict(view.items(start=key)) == {
                    k: v for k, v in want.items() if k >= key
                }
                walked.append(key)
            assert walked == sorted(want, reverse=True)
    storage.close()


def test_walks_of_a_view_of_now_interleave(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.apply([_courier(f"k{i}", f"c{i % 3}", 0, i) for i in range(30)], {}, True, 1)
    store = _View(storage)
    with store.view() as view:
        storage.apply([_courier(f"k{i}", "moved", 0, 30 + i) for i in range(30)], {}, True, 1)
        outer, inner = view.keys(), view.keys(reverse=True)
        pairs = [(a, next(inner)) for a in outer]
        assert [a for a, _ in pairs] == sorted(f"k{i}" for i in range(30))
        assert [b for _, b in pairs] == sorted((f"k{i}" for i in range(30)), reverse=True)
        found = view.find("by_courier", "c1")
        assert [k for k, _ in found] == [f"k{i}" for i in sorted(range(1, 30, 3), key=str)]
    storage.close()


def test_a_view_keeps_the_versions_a_purge_removes_after_it(tmp_path: Path) -> None:
    storage = _open_history(tmp_path / "s")
    storage.apply([_rec("a", 1, 1_000, 0, 0), _rec("a", 2, 2_000, 0, 1)], {}, True, 1)
    storage.apply([_rec("b", 1, 1_000, 0, 2), _rec("b", None, 2_000, 0, 3)], {}, True, 1)
    store = _View(storage)
    with store.view(as_of=1.5) as view:
        assert storage.history.purge(3_000, 100).removed == 3  # a=1, and b's two versions
        # The store has lost a=1 (in a store whose window had moved past 3 s, its horizon
        # would refuse the time); the view has not.
        assert store.get("a", as_of=1.5) is None
        assert dict(view.items()) == {"a": 1, "b": 1}  # the view: as it was
        assert view.get("b") == 1
    storage.close()


def test_a_view_as_of_a_time_the_store_cannot_answer_is_refused_at_once(tmp_path: Path) -> None:
    storage = _open_history(tmp_path / "s", window_ms=WINDOW_MS, from_ms=5_000)
    storage.apply([_rec("a", 1, 4_000, 0, 0)], {}, True, 1)
    store = _View(storage)
    with pytest.raises(HistoryUnavailable, match="oldest time it can answer") as caught:
        store.view(as_of=4.0)
    assert caught.value.oldest == 5.0
    with store.view(as_of=5.0) as view, pytest.raises(HistoryUnavailable):
        view.get("a", as_of=4.0)  # a read naming an older time is refused too
    storage.close()


def test_an_index_as_of_a_time_answers_from_the_versions_never_todays_entries(
    tmp_path: Path,
) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.history.define(WINDOW_MS, 0)
    storage.apply([_courier("a", "c1", 0, 0, ts=1_000)], {}, True, 1)
    storage.apply([_courier("a", "c2", 0, 1, ts=2_000)], {}, True, 1)
    store = _View(storage)
    then = orjson.loads(_v("c1"))
    with store.view(as_of=1.5) as view:
        assert list(view.find("by_courier", "c1")) == [("a", then)]
        assert list(view.find("by_courier", "c2")) == []  # today's entry is not then's
        assert list(view.find_matches("by_courier", prefix="c")) == [("c1", "a", then)]
        assert view.find_count("by_courier", "c1") == 1
        assert view.to_arrow(index="by_courier").read_all().column("key").to_pylist() == ["a"]
    assert list(store.find_matches("by_courier", "c1", as_of=1.5)) == [("c1", "a", then)]
    with store.view() as view:  # a view of now reads the index it pinned
        assert [k for k, _ in view.find("by_courier", "c2")] == ["a"]
    storage.close()


class _Swapped:
    """A source whose copy a swap replaces (replicas/live.py), as a heal or a switch does."""

    def __init__(self, first: Copy) -> None:
        self.live = Live(first)
        self.topic, self.path = TOPIC, first.storage.path

    def copy(self) -> Copy:
        return self.live.current

    def serving(self) -> Copy:
        return self.live.current

    def scan(self, open_scan: Callable[[Copy], Iterator[Any]]) -> Iterator[Any]:
        return self.live.scan(open_scan)


def test_a_view_holds_its_copy_across_swaps_until_it_is_closed(tmp_path: Path) -> None:
    copies = []
    for i in range(3):
        storage = Storage(tmp_path / f"s{i}")
        storage.initialise(TOPIC, None, 1)
        storage.load(storage.read_meta())
        storage.apply([(b"k", orjson.dumps(i), None, 0, 0, 1_000)], {}, True, 1)
        copies.append(Copy(storage, ValueFormats(), TOPIC))
    source = _Swapped(copies[0])
    store = Viewable(source)
    view = store.view()
    source.live.swap(copies[1])
    source.live.swap(copies[2])  # without the view, this would close the first copy
    assert store.get("k") == 2 and view.get("k") == 0 and dict(view.items()) == {"k": 0}
    assert copies[0].lookup(b"k") is not None  # still open
    view.close()
    with pytest.raises(DbClosedError):  # closed at the view's end
        copies[0].lookup(b"k")
    source.live.close()


def test_the_faces_over_files_and_asyncio_open_views(tmp_path: Path) -> None:
    storage = _open_history(tmp_path / "s")
    storage.apply([_rec("a", 1, 1_000, 0, 0), _rec("a", 2, 2_000, 0, 1)], {}, True, 1)
    storage.close()
    with ReadOnlyStore(tmp_path / "s") as files, files.view(as_of=1.5) as view:
        assert view.get("a") == 1 and dict(view.items()) == {"a": 1}

    async def read() -> Any:
        async with AsyncReadOnlyStore(tmp_path / "s") as store:
            with store.view() as now, store.view(as_of=1.5) as then:
                return now.get("a"), then.get("a")

    assert asyncio.run(read()) == (2, 1)
