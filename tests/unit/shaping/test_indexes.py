"""Secondary indexes without a broker, on real RocksDB: the entries each write leaves, find()
and find_count(), the background build (resumed after an interruption), index functions that
fail, and the settings refused."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import rocksdict

from globalstore import IndexNotReady, ReadOnlyStore, SharedStore, UnknownIndex
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.thread import StoreThread
from globalstore.shaping.indexes import IndexBuild
from globalstore.shaping.migrate import Migration
from globalstore.shaping.rules import write_rules
from globalstore.storage import Storage
from globalstore.storage.keys import bounds, id_ranges
from globalstore.storage.meta import IndexDef, index_key
from globalstore.stores.store import Store
from tests.unit.prepared import prepared
from tests.unit.store_fakes import FakeConsumer, LikeTheCLoop, OneCopy, batch, messages
from tests.unit.stores.test_shared_store_parts import Writer

TOPIC = "t"


def by_courier(key: str, value: Any) -> str | None:
    courier: str | None = value.get("courier")
    return courier


def by_tag(key: str, value: Any) -> Iterable[str]:
    return value.get("tags", [])


FNS: dict[str, Callable[[str, Any], Any]] = {"by_courier": by_courier, "by_tag": by_tag}


def _v(courier: str | None = None, *tags: str) -> str:
    body: dict[str, Any] = {"tags": list(tags)}
    if courier is not None:
        body["courier"] = courier
    return orjson.dumps(body).decode()


class _View(Store):
    """The query methods over one open Storage (as GlobalStore has them once ready)."""

    def __init__(self, storage: Storage, fns: Mapping[str, Any] = FNS) -> None:
        """`fns`: the function indexes it reads as of a time."""
        self.storage = storage
        source = OneCopy(storage, TOPIC, None, fns)
        super().__init__(source)  # type: ignore[arg-type]  # reads only


def _open(
    path: Path, fns: Mapping[str, Any] = FNS, versions: Mapping[str, int] | None = None
) -> tuple[Storage, IndexBuild]:
    """A storage prepared as the store thread prepares it: initialised if new, its meta
    loaded, the config's indexes defined."""
    config = StoreConfig(
        TOPIC, "f:1", path, indexes=fns, index_versions=versions or {}, index_build_chunk=3
    )
    storage = prepared(config)
    return storage, IndexBuild(storage.indexes, config.index_build_chunk)


class _Model:
    """What the indexes must say: the live values, and each index value's keys."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, Any]] = {}

    def apply(self, records: Iterable[tuple[str, str | None]]) -> None:
        for key, value in records:
            if value is None:
                self.values.pop(key, None)
            else:
                self.values[key] = orjson.loads(value)

    def find(self, name: str, value: str) -> list[str]:
        fn = FNS[name]
        return sorted(k for k, v in self.values.items() if value in _as_set(fn(k, v)))

    def index_values(self, name: str) -> set[str]:
        fn = FNS[name]
        return {x for k, v in self.values.items() for x in _as_set(fn(k, v))}


def _as_set(out: Any) -> set[str]:
    return set() if out is None else {out} if isinstance(out, str) else set(out)


def _keys(found: Iterator[tuple[str, Any]]) -> list[str]:
    return [k for k, _ in found]


def _counts_hold_the_entries(storage: Storage) -> None:
    """Each index's stored count of entries is how many it holds."""
    index = storage.index
    assert index is not None
    for name, d in storage.state.indexes.items():
        assert storage.state.index_entries.get(name, 0) == index.count(*bounds(d.id)), name


def _entries_hold_the_model(view: Store, model: _Model) -> None:
    for name in FNS:
        for value in model.index_values(name) | {"nobody"}:
            assert _keys(view.find(name, value)) == model.find(name, value), (name, value)
            assert view.find_count(name, value) == len(model.find(name, value))


def test_puts_overwrites_and_tombstones_keep_the_entries_right(tmp_path: Path) -> None:
    storage, build = _open(tmp_path / "s")
    assert not build.pending  # an empty store's indexes are built as it is written
    view, model = _View(storage), _Model()
    batches = [
        [("a", _v("c-1", "x")), ("b", _v("c-1", "x", "y")), ("c", _v("c-2"))],
        # Overwrite with a new courier, drop a tag, a tombstone, a key without a courier.
        [("a", _v("c-2", "x")), ("b", _v("c-1")), ("c", None), ("d", _v(None, "y"))],
        # The same key three times in one batch: only its last value counts.
        [("e", _v("c-3")), ("e", _v("c-4", "z")), ("a", None), ("e", _v("c-5"))],
    ]
    offset = 0
    for records in batches:
        storage.apply(batch(*records, start=offset), {}, True, 1)
        offset += len(records)
        model.apply(records)
        _entries_hold_the_model(view, model)
    assert _keys(view.find("by_courier", "c-1")) == ["b"]
    assert view.find_count("by_courier", "c-4") == 0
    assert dict(view.find("by_courier", "c-5")) == {"e": {"tags": [], "courier": "c-5"}}
    # One entry per (key, index value) left: b c-1, d y, e c-5.
    assert dict(storage.state.index_entries) == {"by_courier": 2, "by_tag": 1}
    storage.close()
    reopened, _ = _open(tmp_path / "s")  # the counts were stored with the entries
    assert dict(reopened.state.index_entries) == {"by_courier": 2, "by_tag": 1}
    reopened.close()


def test_find_ranges_over_index_values_then_keys(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    couriers = {"k1": "c-1", "k2": "c-10", "k3": "c-1", "k4": "c-2", "k5": "c-10", "k6": "d-1"}
    storage.apply(batch(*((k, _v(c)) for k, c in couriers.items())), {}, True, 1)
    view = _View(storage)
    assert _keys(view.find("by_courier", "c-1")) == ["k1", "k3"]
    # Index value order, then key order.
    assert _keys(view.find("by_courier", prefix="c-1")) == ["k1", "k3", "k2", "k5"]
    assert _keys(view.find("by_courier", start="c-10", end="d")) == ["k2", "k5", "k4"]
    assert _keys(view.find("by_courier", start="c-1", end="c-10")) == ["k1", "k3"]
    assert _keys(view.find("by_courier", prefix="c-", start="c-2")) == ["k4"]
    assert _keys(view.find("by_courier", prefix="c", reverse=True)) == [
        "k4",
        "k5",
        "k2",
        "k3",
        "k1",
    ]
    assert _keys(view.find("by_courier", prefix="c", reverse=True, limit=2)) == ["k4", "k5"]
    assert _keys(view.find("by_courier", "c-10", reverse=True)) == ["k5", "k2"]
    assert _keys(view.find("by_courier", "c-1", limit=1)) == ["k1"]
    assert _keys(view.find("by_courier")) == ["k1", "k3", "k2", "k5", "k4", "k6"]
    assert _keys(view.find("by_courier", "c")) == [] and view.find_count("by_courier", "c") == 0
    assert view.find_count("by_courier", "c-10") == 2
    # Continued past an (index value, key) pair, as a page cursor does, either way.
    after = [k for _, k, _ in view.find_matches("by_courier", prefix="c", after=("c-1", "k3"))]
    assert after == ["k2", "k5", "k4"]
    back = view.find_matches("by_courier", prefix="c", reverse=True, after=("c-10", "k5"))
    assert [(iv, k) for iv, k, _ in back] == [("c-10", "k2"), ("c-1", "k3"), ("c-1", "k1")]
    with pytest.raises(ValueError, match="either a value, or prefix"):
        view.find("by_courier", "c-1", prefix="c")
    storage.close()
    with ReadOnlyStore(tmp_path / "s") as readonly:  # the same query code, from the files
        assert _keys(readonly.find("by_courier", prefix="c-1")) == ["k1", "k3", "k2", "k5"]
        assert readonly.find_count("by_courier", "c-1") == 2


def test_a_find_reads_one_view_while_batches_are_applied(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.apply(batch(*((f"k{i}", _v("c-1")) for i in range(5))), {}, True, 1)
    view = _View(storage)
    found = view.find("by_courier", "c-1")
    first = next(found)
    # Moves k3 to another courier and rewrites k4, after the find began: it does not see it.
    storage.apply(batch(("k3", _v("c-2")), ("k4", _v("c-1", "new")), start=5), {}, True, 1)
    rest = list(found)
    assert [first[0], *_keys(iter(rest))] == ["k0", "k1", "k2", "k3", "k4"]
    assert rest[-1][1] == {"tags": [], "courier": "c-1"}
    assert _keys(view.find("by_courier", "c-1")) == ["k0", "k1", "k2", "k4"]
    storage.close()


def test_unknown_and_unbuilt_indexes_are_refused(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s", {})
    storage.apply(batch(("a", _v("c-1"))), {}, True, 1)
    storage.close()
    storage, build = _open(tmp_path / "s")  # indexes added to a store holding a key
    view = _View(storage)
    with pytest.raises(
        UnknownIndex, match=r"has no index 'by_zone' \(it has 'by_courier', 'by_tag'\)"
    ):
        view.find("by_zone", "z")
    with pytest.raises(IndexNotReady, match=r"index 'by_courier' .* is being built"):
        view.find("by_courier", "c-1")
    with pytest.raises(IndexNotReady):
        view.find_count("by_tag", "x")
    assert build.pending and not build.step()  # by_courier, one key: done; by_tag next
    assert _keys(view.find("by_courier", "c-1")) == ["a"]
    assert build.step() and not build.pending
    storage.close()


def _fill(
    storage: Storage, model: _Model, rng: random.Random, n: int, offset: int, exact: bool = True
) -> int:
    records = []
    for _ in range(n):
        key = f"k{rng.randrange(40):02d}"
        value = (
            None
            if rng.random() < 0.2
            else _v(rng.choice(["c-1", "c-2", None]), *rng.sample("xyz", rng.randrange(3)))
        )
        records.append((key, value))
    storage.apply(batch(*records, start=offset), {}, exact, 1)
    model.apply(records)
    return offset + n


def test_a_build_runs_in_chunks_resumes_after_an_interruption_and_follows_writes(
    tmp_path: Path,
) -> None:
    rng, model = random.Random(7), _Model()
    storage, _ = _open(tmp_path / "s", {})
    offset = _fill(storage, model, rng, 60, 0)
    storage.close()
    storage, build = _open(tmp_path / "s")
    assert not build.step()  # one chunk of 3 keys of by_courier
    cursor = storage.state.indexes["by_courier"].cursor
    assert cursor is not None and storage.state.indexes["by_courier"].scanned == 3
    storage.close()  # interrupted: the cursor was written with the chunk
    storage, build = _open(tmp_path / "s")
    d = storage.state.indexes["by_courier"]
    assert (d.cursor, d.scanned, d.built) == (cursor, 3, False)
    steps = 0
    while not build.step():
        steps += 1
        if steps % 2:  # writes keep coming between chunks, before and after the cursor
            offset = _fill(storage, model, rng, 5, offset)
    assert steps > 10  # in chunks, not in one go
    _entries_hold_the_model(_View(storage), model)
    _counts_hold_the_entries(storage)
    storage.close()


def test_an_index_defined_with_reverse_entries_keeps_them_and_stays_right(
    tmp_path: Path,
) -> None:
    """A store whose indexes were defined when every index kept reverse entries (a meta entry
    naming its id "id") goes on reading and writing them; a new one finds its old entries
    from the old values and writes none, and names its id so that such a version cannot
    read its definition."""
    storage, _ = _open(tmp_path / "s")
    assert not any(d.reverse for d in storage.state.indexes.values())
    # The older versions read int(entry["id"]): they cannot, and rebuild the store.
    assert not any("id" in orjson.loads(d.to_bytes()) for d in storage.state.indexes.values())
    older = {}
    for name, d in storage.state.indexes.items():
        stored = orjson.loads(d.to_bytes())
        stored["id"] = stored.pop("index_id")  # as an older version wrote it
        older[name] = IndexDef.parse(orjson.dumps(stored))
    assert all(d.reverse for d in older.values())
    written = storage.batch(data=False)
    for name, d in older.items():
        written.put_meta(index_key(name), d.to_bytes())
    written.change(indexes=older)
    storage.commit(written)
    del written  # it holds a column family, which keeps the database open
    storage.close()
    storage, _ = _open(tmp_path / "s")
    assert all(d.reverse for d in storage.state.indexes.values())
    rng, model, offset = random.Random(11), _Model(), 0
    for i in range(12):
        offset = _fill(storage, model, rng, 15, offset, exact=i % 3 != 0)
        _entries_hold_the_model(_View(storage), model)
        _counts_hold_the_entries(storage)
    index = storage.index
    assert index is not None
    reverse = index.keys(b"k", b"l", 10**6)
    assert len(reverse) == sum(bool(_as_set(by_tag("", v))) for v in model.values.values()) + sum(
        by_courier("", v) is not None for v in model.values.values()
    )  # one a key that has values in an index
    storage.close()


def test_a_new_version_rebuilds_and_a_removed_index_is_deleted(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    storage.apply(batch(("a", _v("c-1", "x")), ("b", _v("c-2", "y"))), {}, True, 1)
    old = storage.state.indexes
    storage.close()

    def shouting(key: str, value: Any) -> str:
        return str(value["courier"]).upper()

    storage, build = _open(tmp_path / "s", {"by_courier": shouting}, {"by_courier": 2})
    new = storage.state.indexes
    assert set(new) == {"by_courier"} and new["by_courier"].id > old["by_tag"].id
    assert (new["by_courier"].version, new["by_courier"].built) == (2, False)
    while not build.step():
        pass
    built = dict(storage.state.indexes)
    view = _View(storage)
    assert _keys(view.find("by_courier", "C-1")) == ["a"]
    assert view.find_count("by_courier", "c-1") == 0
    # Nothing is left of the two old ids: their entries went with their definitions.
    for d in old.values():
        for begin, end in id_ranges(d.id):
            assert storage.index_count(begin, end) == 0
    storage.close()
    storage, build = _open(tmp_path / "s", {"by_courier": shouting}, {"by_courier": 2})
    assert storage.state.indexes == built and not build.pending  # the same version: kept
    storage.close()


def test_both_loops_write_the_same_entries(tmp_path: Path) -> None:
    rng = random.Random(3)
    records = batch(
        *(
            (f"k{rng.randrange(20)}", rng.choice([None, _v("c-1", "x"), _v("c-2")]))
            for _ in range(50)
        )
    )
    written = {}
    for name in ("python", "c"):
        storage, _ = _open(tmp_path / name)
        if name == "c":
            storage.apply_native(LikeTheCLoop(records), 0.0, 1)
        else:
            storage.apply(records, {}, False, 1)
        written[name] = (
            list(storage.index_scan(b"e", b"f", False)),  # every entry
            storage.index_count(b"k", b"l"),  # every key's list of its index values
            dict(storage.state.index_entries),
        )
        storage.close()
    assert written["c"] == written["python"] and written["c"][0]


def test_an_index_function_that_fails_leaves_the_key_out_of_that_index_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def picky(key: str, value: Any) -> Any:
        if value.get("courier") == "boom":
            raise RuntimeError("boom")
        if value.get("courier") == "nul":
            return "a\x00b"
        if value.get("courier") == "int":
            return 7
        return value.get("courier")

    storage, _ = _open(tmp_path / "s", {"by_courier": picky, "by_tag": by_tag})
    storage.apply(batch(("a", _v("c-1", "x")), ("b", _v("c-1", "x"))), {}, True, 1)
    records = [
        ("a", _v("boom", "y")),
        ("b", _v("nul", "y")),
        ("c", _v("int", "y")),
        ("d", "{not json"),
    ]
    with caplog.at_level(logging.WARNING, logger="globalstore"):
        applied = storage.apply(batch(*records, start=2), {}, True, 1)
    view = _View(storage)
    assert applied.records == 4 and storage.state.positions == {0: 6}  # nothing else lost
    assert view.find_count("by_courier", "c-1") == 0  # the old entries went
    assert _keys(view.find("by_tag", "y")) == ["a", "b", "c"]
    assert storage.indexes.indexer is not None and storage.indexes.indexer.failures == {
        "by_courier": 4,
        "by_tag": 1,
    }
    logged = caplog.messages
    assert "every index (unreadable value) failed on key 'd'" in logged[0]  # read first
    assert "index 'by_courier' failed on key 'a' of t (RuntimeError: boom)" in logged[1]
    assert "holds a NUL character" in logged[2] and "or None, not 7" in logged[3]
    storage.close()


def test_index_settings_are_checked() -> None:
    def make(**settings: Any) -> StoreConfig:
        return StoreConfig(TOPIC, "f:1", Path("s"), **settings)

    cases: list[tuple[dict[str, Any], str]] = [
        ({"indexes": {"": by_courier}}, "index name must be a non-empty str, not ''"),
        ({"indexes": {3: by_courier}}, "index name must be a non-empty str, not 3"),
        ({"indexes": {"a b": by_courier}}, "may hold only letters, digits"),
        ({"indexes": {"x": 3}}, "index 'x': function is not callable: 3"),
        (
            {"indexes": {"x": by_courier}, "index_versions": {"y": 2}},
            "index_versions names 'y', which is not an index \\(indexes: 'x'\\)",
        ),
        ({"indexes": {"x": by_courier}, "index_versions": {"x": 0}}, "must be an int >= 1, not 0"),
        ({"indexes": {"x": by_courier}, "index_versions": {"x": "2"}}, "must be an int >= 1"),
        ({"indexes": {"x": by_courier}, "index_versions": {"x": True}}, "must be an int >= 1"),
    ]
    for settings, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            make(**settings)
    assert make(indexes=FNS, index_versions={"by_tag": 3}).index_definitions() == {
        "by_courier": 1,
        "by_tag": 3,
    }


def test_the_store_thread_builds_an_added_index_while_it_follows(tmp_path: Path) -> None:
    """The wiring: the preparation defines the index, the loop indexes what it applies and
    builds the rest between follow batches (a fake consumer, no broker)."""
    rng, model = random.Random(11), _Model()
    storage, _ = _open(tmp_path / "s", {})
    _fill(storage, model, rng, 200, 0)
    produced = [(f"k{i:02d}", _v(f"c-{i % 3}", "x")) for i in range(40)]
    consumer = FakeConsumer(
        TOPIC, {0: [*messages(*[("pad", None)] * 200), *messages(*produced, start=200)]}
    )
    model.apply(produced)
    config = StoreConfig(
        TOPIC,
        "f:1",
        storage.path,
        indexes=FNS,
        index_build_chunk=5,
        poll_timeout=0.005,
        native_restore=False,
    )
    storage.close()
    storage = prepared(config)  # reopened with the indexes: their build is due

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        migration = Migration(storage, config.value_formats(), TOPIC)
        building = IndexBuild(storage.indexes, config.index_build_chunk)
        return Prepared(Plan({0: 200}, {0: 240}, True), migration, None, building)

    thread = StoreThread(config, storage, consumer_factory=lambda _c: consumer, prepare=prepare)
    thread.start()
    try:
        assert thread.ready.wait(10)
        view = _View(storage)
        more = [("k01", _v("c-9")), ("k02", None), ("new", _v("c-9", "y"))]
        consumer.partitions[0] += messages(*more, start=240)  # produced while building
        model.apply(more)
        deadline = time.monotonic() + 10
        while not all(d.built for d in storage.state.indexes.values()):
            assert time.monotonic() < deadline, storage.state.indexes
            time.sleep(0.005)
        _eventually_applied = time.monotonic() + 10
        while storage.state.positions.get(0) != 243:
            assert time.monotonic() < _eventually_applied
            time.sleep(0.005)
        _entries_hold_the_model(view, model)
        assert _keys(view.find("by_courier", "c-9")) == ["k01", "new"]
    finally:
        thread.stop()
        thread.join()


def test_a_shared_reader_finds_what_the_writer_indexed(tmp_path: Path) -> None:
    """SharedStore (a RocksDB secondary in another process, here in this one) answers find
    from the entries the writer stored, caught up before each query."""
    storage = Storage(tmp_path, rules=write_rules(StoreConfig(TOPIC, "f:1", tmp_path, indexes=FNS)))
    writer = Writer(tmp_path, storage)  # initialises the store
    try:
        storage.load(storage.read_meta())
        storage.define(bulk=False, now_ms=0)
        writer.write(("a", _v("c-1", "x")), ("b", _v("c-2")), start=0)
        with SharedStore(tmp_path).start(timeout=5) as shared:
            assert _keys(shared.find("by_courier", "c-1")) == ["a"]
            writer.write(("a", _v("c-2")), ("c", _v("c-1", "x")), start=2)
            assert _keys(shared.find("by_courier", "c-1")) == ["c"]
            assert shared.find_count("by_courier", "c-2") == 2
            assert _keys(shared.find("by_tag", "x")) == ["c"]
            assert shared.status().indexes["by_courier"].entries == 3
    finally:
        writer.close()


def test_a_wiped_store_has_its_indexes_built_at_once_and_none_it_is_not_given(
    tmp_path: Path,
) -> None:
    """A rebuild wipes the store: its indexes start again, empty and built (every write of the
    restore indexes what it writes); an index no longer given is gone with its entries."""
    storage, _ = _open(tmp_path / "s")
    storage.apply(batch(("a", _v("c-1", "x"))), {}, True, 1)
    storage.close()
    storage, build = _open(tmp_path / "s")  # the same indexes: kept as they are
    assert not build.pending and dict(storage.state.index_entries) == {"by_courier": 1, "by_tag": 1}
    storage.close()
    storage, _ = _open(tmp_path / "s", {"by_tag": by_tag})  # restarted with one index
    storage.wipe()  # then rebuilt
    storage.initialise(TOPIC, None, 1)
    storage.load(storage.read_meta())
    storage.define(bulk=False, now_ms=1)
    assert set(storage.state.indexes) == {"by_tag"} and storage.state.indexes["by_tag"].built
    assert dict(storage.state.index_entries) == {"by_tag": 0}
    storage.apply(batch(("b", _v("c-2", "x"))), {}, True, 1)
    assert _keys(_View(storage).find("by_tag", "x")) == ["b"]
    storage.close()
    storage, _ = _open(tmp_path / "s", {})  # no index given: none left, no entry either
    assert dict(storage.state.indexes) == {} and storage.index_count(b"", b"\xff") == 0
    storage.close()


def test_the_index_family_exists_only_once_an_index_is_defined(tmp_path: Path) -> None:
    # A store that never had an index keeps the column families a version from before
    # indexes opens; a secondary opened before the first index finds it at its next catch-up.
    storage, _ = _open(tmp_path / "s", {})
    storage.apply(batch(("a", _v("c-1"))), {}, True, 1)
    db_dir = str(tmp_path / "s" / "db")
    assert sorted(rocksdict.Rdict.list_cf(db_dir)) == ["default", "meta"]
    reader = Storage(tmp_path / "s", secondary=tmp_path / "secondary")
    storage.close()

    storage, build = _open(tmp_path / "s")
    while not build.step():
        pass
    assert sorted(rocksdict.Rdict.list_cf(db_dir)) == ["default", "index", "meta"]
    reader.catch_up()
    assert _keys(_View(reader).find("by_courier", "c-1")) == ["a"]
    reader.close()
    storage.close()


def test_a_secondarys_index_scan_reads_its_values_at_the_entries_instant(tmp_path: Path) -> None:
    """A RocksDB secondary reads the latest data even through a snapshot's get: an index scan
    on one (a SharedStore, a process follower) that a catch-up overtakes mid-scan must still
    pair each entry with the value of the same instant."""
    storage, _ = _open(tmp_path / "s")
    storage.apply(batch(*((f"k{i}", _v("c-1")) for i in range(6))), {}, True, 1)
    reader = Storage(tmp_path / "s", secondary=tmp_path / "secondary")
    reader.catch_up()
    scan = reader.index_scan(*id_ranges(reader.state.indexes["by_courier"].id)[0], False)
    assert next(scan)[1] == b"k0"
    storage.apply(batch(*((f"k{i}", _v("c-2")) for i in range(6)), start=6), {}, True, 1)
    reader.catch_up()  # as a query on another thread does, mid-scan
    assert b"c-2" in (reader.get(b"k3") or b"")  # the reader sees the new values now
    rest = list(scan)
    assert [k for _, k, _ in rest] == [f"k{i}".encode() for i in range(1, 6)]
    assert all(b"c-1" in raw for _, _, raw in rest), rest  # not the values written since
    reader.close()
    storage.close()
