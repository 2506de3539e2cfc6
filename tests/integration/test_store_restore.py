"""Restore: a new store reaches the topic's end, a restarted store resumes without rereading."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from globalstore import (
    GlobalStore,
    ReadOnlyStore,
    StoreClosed,
    StoreConfig,
    StoreListener,
    StoreNotReady,
)
from globalstore.follow.topic import end_offsets
from globalstore.storage import Storage
from tests.integration.store_support import Record, produce


class Recorder(StoreListener):
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.batches = 0
        self.records = 0
        self.end: dict[int, int] = {}

    def on_restore_start(self, topic, start_offsets, end_offsets):  # type: ignore[no-untyped-def]
        self.calls.append("start")
        self.end = dict(end_offsets)

    def on_batch_restored(self, topic, positions, records):  # type: ignore[no-untyped-def]
        self.batches += 1
        self.records += records

    def on_restore_end(self, topic, total_records, seconds):  # type: ignore[no-untyped-def]
        self.calls.append(f"end:{total_records}")


def test_restore_then_resume(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    records = [(f"k{i:04d}", {"n": i}) for i in range(300)]
    records += [("k0001", None), ("k0002", {"n": -2})]  # a delete and an update
    produce(kafka_bootstrap, topic, records)

    rec = Recorder()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[rec]) as store:
        assert store.get("k0000") == {"n": 0}
        assert store.get("k0001") is None
        assert store.get("k0002") == {"n": -2}
        assert store.count() == 299
        assert sum(store.position().values()) == 302
        assert rec.calls == ["start", "end:302"]
        assert rec.records == 302
        keys = list(store.keys())
        assert keys == sorted({k for k, _ in records} - {"k0001"})
        entry = store.get_entry("k0002")
        assert entry is not None and entry.value == {"n": -2} and entry.timestamp > 0
        first_position = store.position()

    rec2 = Recorder()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[rec2]) as store:
        assert rec2.records == 0, "a clean restart must not read anything twice"
        assert store.position() == first_position
        assert store.count() == 299
        assert store.get("k0299") == {"n": 299}


class QueriesDuringRestore(StoreListener):
    """Tries a query from inside the restore: it must say 'not ready', retriably."""

    def __init__(self) -> None:
        self.store: GlobalStore | None = None
        self.errors: list[BaseException] = []

    def on_batch_restored(self, topic, positions, records):  # type: ignore[no-untyped-def]
        assert self.store is not None
        try:
            self.store.get("k1")
        except BaseException as exc:
            self.errors.append(exc)


def test_queries_before_ready_are_retriable(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(50)])
    listener = QueriesDuringRestore()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[listener])
    listener.store = store
    with pytest.raises(StoreNotReady):
        store.get("k1")
    store.start()
    try:
        assert listener.errors and all(isinstance(e, StoreNotReady) for e in listener.errors)
        assert store.get("k1") == 1
    finally:
        store.close()
    with pytest.raises(StoreClosed):
        store.get("k1")


def test_range_queries(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    keys = ["a1", "a2", "a3", "b1", "b2", "c1"]
    produce(kafka_bootstrap, topic, [(k, {"k": k}) for k in keys])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert list(store.keys(prefix="a")) == ["a1", "a2", "a3"]
        assert list(store.keys(prefix="a", reverse=True)) == ["a3", "a2", "a1"]
        assert list(store.keys(start="a2", end="b2")) == ["a2", "a3", "b1"]
        assert list(store.keys(start="a2", end="b2", reverse=True)) == ["b1", "a3", "a2"]
        assert list(store.keys(prefix="b", start="b2")) == ["b2"]
        assert list(store.keys(limit=2, reverse=True)) == ["c1", "b2"]
        assert list(store.keys(limit=0)) == []
        assert dict(store.items(prefix="c")) == {"c1": {"k": "c1"}}
        assert list(store.keys(prefix="zz")) == []


def test_with_works_on_a_new_and_on_a_started_store(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", {"v": 1})])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.get("a") == {"v": 1}
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s").start(timeout=30) as store:
        assert store.get("a") == {"v": 1}
    with pytest.raises(StoreClosed):
        store.get("a")


def test_bulk_restore_is_ready_before_counting_and_counts_exactly(
    kafka_bootstrap: str, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = make_topic(partitions=3)
    records = [(f"k{i:04d}", {"n": i}) for i in range(3000)]
    records += [(f"k{i:04d}", None) for i in range(0, 3000, 3)]  # 1000 deletes
    records += [(f"k{i:04d}", {"n": -i}) for i in range(1, 3000, 3)]  # 1000 overwrites
    produce(kafka_bootstrap, topic, records)
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=kafka_bootstrap,
        path=tmp_path / "s",
        bulk_restore_threshold=0,  # force the bulk path: counted after ready
        recount_chunk=1,  # one key per loop turn: 2000 turns
    )
    changes = [("new-1", {"n": 1}), ("k0001", None), ("k0000", 0)]
    during = ProduceWhenRestored(kafka_bootstrap, topic, changes)
    # The count makes no progress until the changes were applied, so they land mid-count
    # however long the broker takes to deliver them.
    counting, held_until = Storage.recount_step, time.monotonic() + 60

    def held(storage: Storage, chunk: int) -> int | None:
        if not during.counts_seen and time.monotonic() < held_until:
            return None
        return counting(storage, chunk)

    monkeypatch.setattr(Storage, "recount_step", held)
    store = GlobalStore.from_config(config, listeners=[during])
    during.store = store
    with store:
        # Changes that arrive while the keys are being counted count exactly once.
        assert store.wait_for(end_offsets(kafka_bootstrap, topic), 30)
        assert store.count() == 2000 + 1 - 1 + 1
        assert store.count() == len(list(store.keys()))
    assert during.counts_seen, "the changes produced at restore end were never applied"
    assert None in during.counts_seen, (
        f"every change was applied after the recount ended (counts {during.counts_seen}): "
        "the test did not overlap them"
    )
    with ReadOnlyStore(tmp_path / "s") as view:
        assert view.status().key_count == 2001


class ProduceWhenRestored(StoreListener):
    """Produces `records` once the restore ends, on the store thread: after the recount took
    its snapshot and before it counted a key. Notes the key count each applied change saw."""

    def __init__(self, bootstrap: str, topic: str, records: list[Record]) -> None:
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.store: GlobalStore | None = None
        self.produced = False
        self.counts_seen: list[int | None] = []

    def on_restore_end(self, topic, total_records, seconds):  # type: ignore[no-untyped-def]
        produce(self.bootstrap, self.topic, self.records)
        self.produced = True

    def on_changes(self, topic, upserted, deleted):  # type: ignore[no-untyped-def]
        assert self.store is not None
        mine = {k for k, _ in self.records}
        if self.produced and mine & {*upserted, *deleted}:
            self.counts_seen.append(self.store.status().key_count)


def test_last_restore_time_survives_a_restart(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", {"v": 1})])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        restored = store.status().last_restore_at
    assert restored is not None
    with ReadOnlyStore(tmp_path / "s") as view:
        offline = view.status()
    assert offline.last_restore_at == restored and offline.position == {0: 1}
    assert offline.key_count == 1 and offline.topic == topic
    seen = SeenAtRestoreStart()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[seen])
    seen.store = store
    with store:
        later = store.status().last_restore_at
    assert seen.last_restore_at == restored  # while restoring: the previous run's
    assert later is not None and later >= restored


class SeenAtRestoreStart(StoreListener):
    def __init__(self) -> None:
        self.store: GlobalStore | None = None
        self.last_restore_at: float | None = None

    def on_restore_start(self, topic, start_offsets, end_offsets):  # type: ignore[no-untyped-def]
        assert self.store is not None
        self.last_restore_at = self.store.status().last_restore_at
