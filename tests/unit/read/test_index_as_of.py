"""Reads of an index as of a time without a broker, on real RocksDB: find, find_matches,
find_count and to_arrow(index=...) as of a time checked against an independent replay of
the records with the index applied to each key's value then (tombstones, timestamps that go
backwards, keys that move partition), for a function index and a declared one; their order,
limit, reverse and after as find() has them now; a ttl judged at the time asked; the faces
over files (a declared index, and a function index when given its function); the declared
path recorded in an older store's definition."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore import HistoryUnavailable, ReadOnlyStore
from globalstore.aio import AsyncReadOnlyStore
from globalstore.storage import Record, Storage
from globalstore.storage.meta import IndexDef, index_key
from tests.unit.read.test_as_of import WINDOW_MS, _apply_in_batches, _rec, _replay
from tests.unit.shaping.test_indexes import _open, _View, by_courier

INDEXES = {"by_courier": by_courier, "by_field": "courier", "by_tag": "tags"}
KEYS = [f"k{i}" for i in range(12)]


def _random_records(rng: random.Random, n: int) -> list[Record]:
    """Records of 12 keys over two partitions, a key's partition changing midway; values
    with a courier (sometimes none), tags; tombstones; timestamps that sometimes go back."""
    offsets = {0: 0, 1: 0}
    out = []
    for i in range(n):
        key = rng.randrange(12)
        p = (key + (i > n // 2)) % 2
        ts = 1_000 + offsets[p] * 10 + rng.choice((0, 0, 0, -35, 7))
        value: Any = {"tags": rng.sample(["x", "y", "z"], rng.randrange(3))}
        if rng.random() < 0.8:
            value["courier"] = f"c{rng.randrange(4)}"
        out.append(_rec(f"k{key}", None if rng.random() < 0.2 else value, ts, p, offsets[p]))
        offsets[p] += 1
    return out


def _written(path: Path, seed: int) -> tuple[Storage, list[Record]]:
    storage, _ = _open(path, INDEXES)
    storage.history.define(WINDOW_MS, 0)
    rng = random.Random(seed)
    records = _random_records(rng, 300)
    _apply_in_batches(storage, records, rng)
    return storage, records


def _matches(records: list[Record], t_ms: int, field: str) -> list[tuple[str, str, Any]]:
    """(index value, key, value) as of t by the replay, in the index's order."""
    rows = []
    for key in KEYS:
        value = _replay(records, key, t_ms)
        found = None if value is None else value.get(field)
        for index_value in [found] if isinstance(found, str) else found or []:
            rows.append((index_value, key, value))
    return sorted(rows)


@pytest.mark.parametrize("name", ["by_courier", "by_field"])
def test_find_as_of_a_time_equals_a_replay_of_the_records(tmp_path: Path, name: str) -> None:
    storage, records = _written(tmp_path / "s", 46)
    store = _View(storage, INDEXES)
    for t_ms in [*random.Random(7).sample(range(900, 3_200), 25), 10**12]:
        t, want = t_ms / 1000, _matches(records, t_ms, "courier")
        assert list(store.find_matches(name, prefix="c", as_of=t)) == want
        assert list(store.find_matches(name, start="c1", end="c3", reverse=True, as_of=t)) == [
            row for row in reversed(want) if "c1" <= row[0] < "c3"
        ]
        for courier in ("c0", "c2", "nobody"):
            of_it = [(k, v) for c, k, v in want if c == courier]
            assert list(store.find(name, courier, as_of=t)) == of_it
            assert store.find_count(name, courier, as_of=t) == len(of_it)
            last_two = list(store.find(name, courier, reverse=True, limit=2, as_of=t))
            assert last_two == of_it[::-1][:2]
        if len(want) > 3:  # a page cursor continues past the row it names
            after = want[2][:2]
            assert list(store.find_matches(name, prefix="c", after=after, as_of=t)) == want[3:]
        table = store.to_arrow(index=name, prefix="c", as_of=t).read_all()
        assert table.column("key").to_pylist() == [k for _, k, _ in want]
        with store.view(as_of=t) as then:  # a view as of a time reads its index so too
            assert list(then.find_matches(name, prefix="c")) == want
            assert then.find_count(name, "c1") == sum(1 for c, _, _ in want if c == "c1")
    storage.close()


def test_an_index_of_several_values_a_key_as_of_a_time(tmp_path: Path) -> None:
    storage, records = _written(tmp_path / "s", 47)
    store = _View(storage)
    for t_ms in (1_200, 1_900, 2_600):
        want = _matches(records, t_ms, "tags")
        assert list(store.find_matches("by_tag", prefix="", as_of=t_ms / 1000)) == want
    storage.close()


def test_a_key_expired_at_the_time_asked_is_not_found(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", INDEXES)
    storage.history.define(WINDOW_MS, 0)
    storage.time.define(1_000, False)  # a second's ttl
    storage.apply([_rec("a", {"courier": "c1"}, 1_000, 0, 0)], {}, True, 1)
    storage.apply([_rec("b", {"courier": "c1"}, 2_500, 0, 1)], {}, True, 1)
    store = _View(storage, INDEXES)
    assert [k for k, _ in store.find("by_field", "c1", as_of=1.9)] == ["a"]
    assert [k for k, _ in store.find("by_field", "c1", as_of=2.6)] == ["b"]  # a expired at 2.0
    assert store.find_count("by_courier", "c1", as_of=3.4) == 1
    storage.close()


def test_the_faces_over_files_read_a_declared_index_as_of_a_time(tmp_path: Path) -> None:
    storage, records = _written(tmp_path / "s", 48)
    storage.close()
    want = [(k, v) for c, k, v in _matches(records, 2_000, "courier") if c == "c1"]
    with ReadOnlyStore(tmp_path / "s") as files:
        assert list(files.find("by_field", "c1", as_of=2.0)) == want
        with pytest.raises(HistoryUnavailable, match="function this store was not given"):
            list(files.find("by_courier", "c1", as_of=2.0))
        assert files.find_count("by_courier", "c1") >= 0  # of now, from the index itself
    with ReadOnlyStore(tmp_path / "s", indexes=INDEXES) as files:  # given the function
        assert list(files.find("by_courier", "c1", as_of=2.0)) == want

    async def read() -> Any:
        async with AsyncReadOnlyStore(tmp_path / "s", indexes=INDEXES) as store:
            return [list(store.find(name, "c1", as_of=2.0)) for name in ("by_field", "by_courier")]

    assert asyncio.run(read()) == [want, want]


def test_the_horizon_refuses_an_index_read_as_of_an_older_time(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", INDEXES)
    storage.history.define(WINDOW_MS, 5_000)
    storage.apply([_rec("a", {"courier": "c1"}, 6_000, 0, 0)], {}, True, 1)
    store = _View(storage)
    with pytest.raises(HistoryUnavailable, match="oldest time it can answer"):
        list(store.find("by_field", "c1", as_of=4.0))
    assert [k for k, _ in store.find("by_field", "c1", as_of=6.0)] == ["a"]
    storage.close()


def test_a_declared_index_records_its_path_also_in_an_older_store(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", INDEXES)
    storage.apply([_rec("a", {"courier": "c1"}, 1_000, 0, 0)], {}, True, 1)
    d = storage.read_meta().indexes["by_field"]
    assert (d.path, storage.read_meta().indexes["by_courier"].path) == ("courier", None)
    # As a store written before paths were recorded: the same definition without one.
    older = orjson.loads(d.to_bytes())
    del older["path"]
    batch = storage.batch()
    batch.put_meta(index_key("by_field"), orjson.dumps(older))
    storage.commit(batch)
    del batch  # it holds the database open
    assert storage.read_meta().indexes["by_field"] == IndexDef(d.id, d.version, True, None, 0)
    storage.close()
    storage, _ = _open(tmp_path / "s", INDEXES)  # the next start records it, entries kept
    assert storage.read_meta().indexes["by_field"] == d
    assert [k for k, _ in _View(storage).find("by_field", "c1")] == ["a"]
    storage.close()
