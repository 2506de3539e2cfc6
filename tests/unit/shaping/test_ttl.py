"""Time to live without a broker, on real RocksDB: the time entries each write leaves (both
loops), expired keys hidden from every query at once, count(), the purge in chunks (a key
rewritten meanwhile stays), values without a timestamp, turning the ttl on and off, the
store thread's purge, and the settings refused."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from globalstore import ReadOnlyStore, SharedStore
from globalstore.codec import pack, record_timestamp
from globalstore.config import StoreConfig
from globalstore.errors import ConfigurationError
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.thread import StoreThread
from globalstore.shaping import ttl
from globalstore.shaping.migrate import Migration
from globalstore.shaping.rules import write_rules
from globalstore.storage import Record, Storage
from globalstore.storage.keys import expired_range, split_time_key, time_key
from globalstore.stores.in_process import InProcessSource
from globalstore.stores.store import Store
from tests.unit.prepared import prepared
from tests.unit.shaping.test_indexes import FNS, TOPIC, _v, _View
from tests.unit.store_fakes import FakeConsumer, LikeTheCLoop, Msg
from tests.unit.stores.test_shared_store_parts import Writer

TTL = 60.0  # seconds
# Record timestamps. A module is imported when the suite is collected, maybe many minutes
# before its tests run: NOW stays unexpired (ttl 60 s) for hours, OLD is expired from the start.
_IMPORTED = int(time.time() * 1000)
NOW = _IMPORTED + 3 * 3_600_000
OLD = _IMPORTED - 3_600_000
FRESH = NOW + 3_600_000  # later still


def _rec(key: str, value: str | None, ts: int, offset: int) -> Record:
    return (key.encode(), None if value is None else value.encode(), None, 0, offset, ts)


def _open(path: Path, ttl_seconds: float | None = TTL, chunk: int = 3) -> tuple[Storage, Any]:
    """A storage prepared as the store thread prepares it, with indexes and the ttl."""
    storage = prepared(StoreConfig(TOPIC, "f:1", path, indexes=FNS, ttl=ttl_seconds))
    return storage, _purge(storage, chunk)


def _purge(storage: Storage, chunk: int = 3) -> ttl.Purge | None:
    """The purge the preparation gives the loop, in steps of `chunk` keys."""
    ttl_ms = storage.rules.ttl_ms
    return None if ttl_ms is None else ttl.Purge(storage.time, ttl_ms, chunk=chunk, idle=0.0)


def _time_entries(storage: Storage) -> set[tuple[int, bytes]]:
    lower, upper = expired_range(2**62)
    assert storage._index is not None
    return {split_time_key(k) for k in storage._index.keys(lower, upper, 2**31)}


def _apply(storage: Storage, *records: Record) -> None:
    storage.apply(list(records), {}, True, NOW)


def test_each_write_keeps_one_time_entry_per_key_with_a_timestamp(tmp_path: Path) -> None:
    storage, _ = _open(tmp_path / "s")
    _apply(storage, _rec("a", _v("c-1"), 100, 0), _rec("b", _v("c-1"), 200, 1))
    assert _time_entries(storage) == {(100, b"a"), (200, b"b")}
    # Newer and older timestamps both replace the key's entry; a tombstone removes it; a
    # record without a timestamp (-1) has none; a key written twice in a batch: its last.
    _apply(
        storage,
        _rec("a", _v("c-2"), 300, 2),
        _rec("b", _v("c-2"), 50, 3),
        _rec("c", _v("c-1"), 400, 4),
        _rec("c", None, 500, 5),
        _rec("d", _v("c-1"), -1, 6),
        _rec("e", _v("c-1"), 600, 7),
        _rec("e", _v("c-3"), 700, 8),
    )
    assert _time_entries(storage) == {(300, b"a"), (50, b"b"), (700, b"e")}
    assert storage.state.time_entries == 3
    _apply(storage, _rec("e", _v("c-4"), 700, 9))  # the same timestamp: the entry stays
    assert _time_entries(storage) == {(300, b"a"), (50, b"b"), (700, b"e")}
    storage.close()
    reopened, _ = _open(tmp_path / "s")  # the count was stored with the entries
    assert reopened.state.time_entries == 3 and reopened.state.ttl_ms == 60_000
    reopened.close()


def test_both_loops_write_the_same_time_entries(tmp_path: Path) -> None:
    records = [
        _rec(f"k{i % 7}", None if i % 5 == 0 else _v("c-1"), OLD + (i * 37) % 11, i)
        for i in range(60)
    ]
    written = {}
    for name in ("python", "c"):
        storage, _ = _open(tmp_path / name)
        if name == "c":
            storage.apply_native(LikeTheCLoop(records), 0.0, NOW)
        else:
            storage.apply(records, {}, False, NOW)
        written[name] = (_time_entries(storage), storage.state.time_entries)
        storage.close()
    assert written["c"] == written["python"] and written["c"][0]


def _filled(path: Path) -> tuple[Storage, Any, _View]:
    storage, purge = _open(path)
    _apply(
        storage,
        _rec("old-1", _v("c-1", "x"), OLD, 0),
        _rec("old-2", _v("c-1"), OLD + 1, 1),
        _rec("new-1", _v("c-1", "x"), FRESH, 2),
        _rec("new-2", _v("c-2"), NOW, 3),
        _rec("legacy", _v("c-1"), -1, 4),
    )
    view = _View(storage)
    return storage, purge, view


LIVE = ["legacy", "new-1", "new-2"]


def test_expired_keys_are_gone_from_every_query_at_once(tmp_path: Path) -> None:
    storage, _, view = _filled(tmp_path / "s")
    assert view.get("old-1") is None and "old-1" not in view and view.get_entry("old-2") is None
    with pytest.raises(KeyError):
        view["old-1"]
    assert view.get("new-1") == {"tags": ["x"], "courier": "c-1"}
    assert view.get_entry("new-2") is not None
    assert sorted(view.get_many(["old-1", "old-2", "new-1", "legacy"])) == ["legacy", "new-1"]
    assert list(view.keys()) == LIVE
    assert [k for k, _ in view.items(limit=2)] == LIVE[:2]  # the limit counts live keys
    assert [k for k, _ in view.items(reverse=True)] == LIVE[::-1]
    assert len(list(view.values())) == 3 and [e.key for e in view.entries()] == LIVE
    assert [k for k, _ in view.find("by_courier", "c-1")] == ["legacy", "new-1"]
    assert [k for _, k, _ in view.find_matches("by_courier", prefix="c")] == LIVE
    assert view.find_count("by_courier", "c-1") == 2 and view.find_count("by_tag", "x") == 1
    assert view.to_arrow().read_all().column("key").to_pylist() == LIVE
    exported = view.to_arrow(index="by_courier", value="c-1").read_all()
    assert exported.column("key").to_pylist() == ["legacy", "new-1"]
    assert storage.state.count == 5  # still stored, until purged
    assert view._unexpired_count(storage, storage.state.count) == 3
    storage.close()


def test_the_purge_deletes_expired_keys_in_chunks_and_the_time_index_shrinks(
    tmp_path: Path,
) -> None:
    storage, purge, view = _filled(tmp_path / "s")
    more = [_rec(f"exp-{i}", _v("c-9", "x"), OLD + 10 + i, 10 + i) for i in range(6)]
    _apply(storage, *more)
    assert storage.state.time_entries == 10 and storage.state.count == 11
    assert purge.step() == [b"old-1", b"old-2", b"exp-0"]  # oldest first, a chunk
    assert storage.state.time_entries == 7 and storage.state.count == 8
    # Rewritten with a fresh timestamp between two steps: its old entry went with the write.
    _apply(storage, _rec("exp-3", _v("c-9"), NOW, 20))
    assert purge.step() == [b"exp-1", b"exp-2", b"exp-4"]
    assert purge.step() == [b"exp-5"]
    assert purge.step() == []
    assert storage.state.time_entries == 3 and purge.purged == 7
    assert storage.state.count == 4 == view._unexpired_count(storage, 4)
    assert sorted(view.keys()) == ["exp-3", *LIVE]
    assert storage.get(b"old-1") is None  # gone from disk, not just hidden
    # Its secondary index entries went with it, and the index counts followed.
    assert view.find_count("by_tag", "x") == 1
    assert storage.index_count(b"e", b"f") == sum(storage.state.index_entries.values())
    assert storage.read_meta().count == 4
    storage.close()


def test_a_purge_during_the_recount_after_a_bulk_restore_keeps_the_count_exact(
    tmp_path: Path,
) -> None:
    storage, purge = _open(tmp_path / "s")
    storage.apply(
        [_rec(f"k{i}", _v("c-1"), OLD if i < 5 else NOW, i) for i in range(8)], {}, False, NOW
    )
    assert storage.state.count is None  # a bulk apply: counted after
    storage.begin_recount()
    assert len(purge.step()) == 3 and storage.state.count is None
    assert storage.recount_step(2) is None  # the recount's view still holds the purged keys
    assert len(purge.step()) == 2
    assert storage.recount_step(100) == 3 == storage.read_meta().count
    storage.close()


def test_a_stale_time_entry_never_deletes_the_value_it_no_longer_matches(
    tmp_path: Path,
) -> None:
    """Writes keep one entry per key; an entry left behind anyway (damage) is dropped by the
    purge without deleting the fresher value."""
    storage, _, _ = _filled(tmp_path / "s")
    _apply(storage, _rec("old-1", _v("c-5"), NOW, 9))
    assert (OLD, b"old-1") not in _time_entries(storage)  # the rewrite deleted it
    stale, index = storage.batch(), storage.index
    assert index is not None
    index.put(stale.wb, time_key(OLD - 5, b"new-2"), b"")
    storage.commit(stale)
    assert storage.time.purge(ttl.cutoff(60_000), 10) == (2, [b"old-2"])
    assert storage.get(b"new-2") is not None and (NOW, b"old-1") in _time_entries(storage)
    assert _time_entries(storage) == {(NOW, b"old-1"), (FRESH, b"new-1"), (NOW, b"new-2")}
    storage.close()


def test_values_without_a_timestamp_never_expire(tmp_path: Path) -> None:
    """A legacy value (layout 0: bare JSON) or one whose record had no timestamp (-1)."""
    storage, purge, view = _filled(tmp_path / "s")
    storage.write_values([(b"bare", orjson.dumps({"a": 1})), (b"unknown", pack(b"{}", -1, 0, 0))])
    assert record_timestamp(orjson.dumps({"a": 1})) is None
    assert view.get("bare") == {"a": 1} and view.get("unknown") == {}
    while purge.step():
        pass
    assert view.get("bare") == {"a": 1} and "legacy" in view
    storage.close()


def test_turning_the_ttl_on_builds_the_time_index_and_off_drops_it(tmp_path: Path) -> None:
    storage, purge = _open(tmp_path / "s", ttl_seconds=None)
    assert purge is None and not storage.state.time_index
    _apply(storage, *[_rec(f"k{i}", _v("c-1"), OLD + i, i) for i in range(7)])
    _apply(storage, _rec("fresh", _v("c-1"), NOW, 7))
    assert _time_entries(storage) == set()  # no ttl: no time index kept
    storage.close()
    storage, purge = _open(tmp_path / "s")  # given a ttl: built from the stored values
    assert storage.state.time_cursor == b"" and storage.state.ttl_ms == 60_000
    view = _View(storage)
    assert list(view.keys()) == ["fresh"]  # hidden at once, built or not
    assert view._unexpired_count(storage, 8) == 1  # counted over a scan while building
    _apply(storage, _rec("k0", _v("c-1"), NOW, 8))  # ahead of the cursor: left to the build
    assert purge.step() == [] and storage.state.time_cursor == b"k1\x00"  # fresh, k0, k1
    _apply(storage, _rec("k1", _v("c-2"), NOW, 9))  # behind the cursor: indexed by the write
    assert purge.step() == [] and storage.state.time_cursor == b"k4\x00"
    assert purge.step() == [] and storage.state.time_cursor is None  # built
    assert storage.state.time_entries == 8 == len(_time_entries(storage))
    while purge.step():
        pass
    assert sorted(k.decode() for _, k in _time_entries(storage)) == ["fresh", "k0", "k1"]
    assert storage.state.count == 3 == view._unexpired_count(storage, 3)
    storage.close()
    storage, purge = _open(tmp_path / "s", ttl_seconds=None)  # off again: dropped
    assert purge is None and storage.state.time_entries == 0 and storage.state.ttl_ms is None
    assert _time_entries(storage) == set() and storage.read_meta().time_index is None
    assert storage.index_count(b"t", b"u") == 0
    storage.close()


def test_a_bulk_restore_writes_no_time_entries_and_builds_them_after(tmp_path: Path) -> None:
    """A bulk restore starts the time index over (its old entries dropped at once) and
    leaves it to the build after ready; the batches write values only, on both loops."""
    storage, _ = _open(tmp_path / "s")
    _apply(storage, _rec("a", _v("c-1"), OLD, 0), _rec("b", _v("c-1"), NOW, 1))
    assert storage.state.time_entries == 2
    storage.close()
    storage = prepared(StoreConfig(TOPIC, "f:1", tmp_path / "s", indexes=FNS, ttl=TTL), bulk=True)
    purge = _purge(storage)
    assert purge is not None and storage.state.time_cursor == b""
    assert _time_entries(storage) == set() and storage.state.time_entries == 0
    assert not storage.time.tracks_writes
    records = [_rec("c", _v("c-1"), OLD, 2), _rec("a", _v("c-2"), OLD + 1, 3)]
    storage.apply_native(LikeTheCLoop(records), 0.0, NOW)
    storage.apply([_rec("d", _v("c-1"), NOW, 4)], {}, False, NOW)
    assert _time_entries(storage) == set()  # nothing indexed while restoring
    assert purge.step() == [] and purge.step() == [] and storage.state.time_cursor is None
    assert _time_entries(storage) == {(OLD + 1, b"a"), (NOW, b"b"), (OLD, b"c"), (NOW, b"d")}
    assert purge.step() == [b"c", b"a"] and storage.state.time_entries == 2
    storage.close()


def test_a_read_only_store_hides_what_the_writers_ttl_expires(tmp_path: Path) -> None:
    """Another process knows the ttl from the meta column family: it needs no setting."""
    storage, _, _ = _filled(tmp_path / "s")
    storage.close()
    with ReadOnlyStore(tmp_path / "s") as reader:
        assert reader.get("old-1") is None and list(reader.keys()) == LIVE
        assert reader.count() == 3
        status = reader.status().ttl
        assert status is not None and status.seconds == TTL and status.time_index_entries == 4


def test_a_shared_reader_hides_what_the_writers_ttl_expires(tmp_path: Path) -> None:
    """A SharedStore (a RocksDB secondary) reads the ttl the writer stored, and follows it
    when the writer's ttl changes."""
    writer = Writer(tmp_path, _with_ttl(tmp_path, TTL))  # initialises the store
    _define(writer.storage)
    try:
        writer.storage.apply([_rec("old", "1", OLD, 0), _rec("new", "2", NOW, 1)], {}, True, 0)
        writer.announcer.wake()
        with SharedStore(tmp_path).start(timeout=5) as shared:
            assert shared.get("old") is None and list(shared.keys()) == ["new"]
            assert shared.count() == 1 and shared.get_many(["old", "new"]) == {"new": 2}
            # The writer restarts with a ttl of three hours: "old" (an hour old) is back.
            writer.storage.close()
            writer.storage = _define(_with_ttl(tmp_path, 3 * 3600))
            writer.storage.apply([_rec("more", "3", NOW, 2)], {}, True, 0)
            writer.announcer.wake()
            assert shared.get("more") == 3 and shared.get("old") == 1
            assert shared.count() == 3
    finally:
        writer.close()


def _with_ttl(path: Path, ttl_seconds: float) -> Storage:
    return Storage(path, rules=write_rules(StoreConfig(TOPIC, "f:1", path, ttl=ttl_seconds)))


def _define(storage: Storage) -> Storage:
    """`storage` as a writer's start leaves it: its meta loaded, its rules defined."""
    storage.load(storage.read_meta())
    storage.define(bulk=False, now_ms=0)
    return storage


def test_the_store_thread_purges_while_it_follows(tmp_path: Path) -> None:
    """The wiring: the preparation keeps the time index, the loop purges between batches
    and tells the listeners (a fake consumer, no broker)."""
    storage, _ = _open(tmp_path / "s")
    produced = [Msg(f"k{i}".encode(), _v("c-1").encode(), 0, i, OLD + i) for i in range(10)]
    produced.append(Msg(b"fresh", _v("c-1").encode(), 0, 10, NOW))
    consumer = FakeConsumer(TOPIC, {0: produced})
    config = StoreConfig(TOPIC, "f:1", storage.path, ttl=TTL, poll_timeout=0.005)

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        migration = Migration(storage, config.value_formats(), TOPIC)
        purge = _purge(storage, chunk=4)
        assert purge is not None
        return Prepared(Plan({0: 0}, {0: 11}, True), migration, None, None, purge)

    thread = StoreThread(config, storage, consumer_factory=lambda _c: consumer, prepare=prepare)
    thread.start()
    try:
        assert thread.ready.wait(10)
        deadline = time.monotonic() + 10
        while storage.state.time_entries > 1:
            assert time.monotonic() < deadline, storage.state
            time.sleep(0.005)
        assert storage.state.count == 1 and storage.get(b"k3") is None
        deadline = time.monotonic() + 10
        while thread.status.purged < 10:  # published after the step
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        thread.stop()
        thread.join()


def _faked(consumer: FakeConsumer, prepare: Any, **settings: Any) -> Store:
    """A store whose thread reads a fake consumer and is prepared as `prepare` says."""
    return Store(InProcessSource(
        StoreConfig(**settings), consumer_factory=lambda _c: consumer,
        prepare=lambda config, storage: functools.partial(prepare, storage, config),
    ))  # fmt: skip


def test_count_waits_for_the_time_index_build_and_scans_once_the_store_failed(
    tmp_path: Path,
) -> None:
    def prepare(storage: Storage, config: StoreConfig, *_args: Any) -> Prepared:
        storage.initialise(TOPIC, None, 0)
        storage.load(storage.read_meta())
        storage.define(bulk=True, now_ms=0)  # and no purge: its build never runs
        return Prepared(
            Plan({0: 0}, {0: 3}, True), Migration(storage, config.value_formats(), TOPIC)
        )

    produced = [Msg(b"a", b"1", 0, 0, OLD), Msg(b"b", b"2", 0, 1, NOW), Msg(b"c", b"3", 0, 2, NOW)]
    consumer = FakeConsumer(TOPIC, {0: produced})
    store = _faked(
        consumer, prepare, topic=TOPIC, bootstrap_servers="f:1", path=tmp_path, ttl=TTL,
        poll_timeout=0.005, out_of_range="stop", check_topic_config=False,
    )  # fmt: skip
    with store.start(timeout=10):
        counted: list[int] = []
        counting = threading.Thread(target=lambda: counted.append(store.count()))
        counting.start()
        counting.join(0.3)
        assert counting.is_alive() and store.status().ttl.time_index_ready is False  # type: ignore[union-attr]
        consumer.out_of_range = 0  # the thread stops: the build will never end
        counting.join(10)
        assert counted == [2]


@pytest.mark.parametrize("bad", [0, -1, True, "60", float("nan"), float("inf")])
def test_a_ttl_must_be_a_positive_number_of_seconds(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="ttl must be a positive number"):
        StoreConfig(TOPIC, "f:1", tmp_path, ttl=bad)
    assert StoreConfig(TOPIC, "f:1", tmp_path, ttl=0.5).ttl == 0.5
