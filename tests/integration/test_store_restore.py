"""Restore: a new store reaches the topic's end, a restarted store resumes without rereading."""

from __future__ import annotations

from pathlib import Path

import pytest

from globalstore import (
    GlobalStore,
    RestoreListener,
    RetriableError,
    StoreClosed,
    StoreNotReady,
)
from tests.integration.store_support import produce


class Recorder(RestoreListener):
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
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", restore_listener=rec) as store:
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
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", restore_listener=rec2) as store:
        assert rec2.records == 0, "a clean restart must not read anything twice"
        assert store.position() == first_position
        assert store.count() == 299
        assert store.get("k0299") == {"n": 299}


class QueriesDuringRestore(RestoreListener):
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
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", restore_listener=listener)
    listener.store = store
    with pytest.raises(StoreNotReady):
        store.get("k1")
    assert isinstance(StoreNotReady("x"), RetriableError)
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
