"""The API people expect of a store, against a real broker: non-blocking start, mapping
manners, timestamps in scans, change and state listeners, waiting during a restore, and
close() racing start()."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from globalstore import GlobalStore, StoreClosed, StoreConfig, StoreListener, StoreNotReady
from tests.integration.store_support import HeldRestore, produce

WAIT = 30.0


class Recorder(StoreListener):
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.changes: list[tuple[list[str], list[str]]] = []

    def on_state_change(self, topic: str, old: str, new: str) -> None:
        self.states.append((old, new))

    def on_changes(self, topic: str, upserted: Sequence[str], deleted: Sequence[str]) -> None:
        self.changes.append((list(upserted), list(deleted)))


def test_start_without_waiting_then_wait_until_ready(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"k{i:03d}", i) for i in range(300)])
    slow, recorder = HeldRestore(WAIT), Recorder()
    config = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", restore_batch_size=10)
    store = GlobalStore.from_config(config, listeners=[slow, recorder])
    try:
        assert store.start(wait=False) is store
        with pytest.raises(StoreNotReady):
            store.get("k001")
        assert not store.wait_until_ready(timeout=0.2)
        # wait_for during the restore waits, it does not call the store closed.
        waiter = threading.Thread(target=lambda: results.append(store.wait_for({0: 1, 1: 1})))
        results: list[bool] = []
        waiter.start()
        slow.release.set()
        assert store.wait_until_ready(timeout=WAIT), store.status()
        waiter.join(WAIT)
        assert results == [True]
        assert store["k001"] == 1 and "k299" in store and "nope" not in store
        with pytest.raises(KeyError):
            store["nope"]
    finally:
        store.close()
    assert [new for _, new in recorder.states] == ["starting", "restoring", "running", "closed"]
    assert store.status().state == "closed"


def test_mapping_manners_and_timestamps(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", {"n": 1}), ("b", {"n": 2}), ("c", None), ("d", 4)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.get("c") is None and store.get("c", "absent") == "absent"
        assert store.get_many(["d", "c", "a", "zz"]) == {"d": 4, "a": {"n": 1}}
        assert list(store.values()) == [{"n": 1}, {"n": 2}, 4]
        entries = list(store.entries(start="b"))
        assert [(e.key, e.value, e.offset) for e in entries] == [("b", {"n": 2}, 1), ("d", 4, 3)]
        assert all(e.timestamp > 1_600_000_000_000 for e in entries)
        assert entries[0] == store.get_entry("b")


def test_change_listener_sees_every_applied_key(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    recorder = Recorder()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[recorder]) as store:
        produce(kafka_bootstrap, topic, [("c", 3), ("a", None), ("b", 20)])
        assert store.wait_for({0: 5}, timeout=WAIT)
    upserted = [k for batch, _ in recorder.changes for k in batch]
    deleted = [k for _, batch in recorder.changes for k in batch]
    # Restore and follow alike; a key changed twice in one batch is reported once, as it ended.
    assert sorted(set(upserted)) == ["a", "b", "c"] and deleted == ["a"]
    assert upserted.count("c") == 1


def test_close_while_start_waits_is_a_clear_error(tmp_path: Path) -> None:
    # Nothing answers at this address, so start() waits; close() from another thread ends it.
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s")
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            store.start(timeout=WAIT)
        except BaseException as exc:
            outcome.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    deadline = time.monotonic() + WAIT
    while store.status().state != "starting":
        assert time.monotonic() < deadline, f"start() never began: {store.status()}"
        time.sleep(0.01)
    began = time.monotonic()
    store.close()
    starter.join(WAIT)
    assert not starter.is_alive() and time.monotonic() - began < 10
    assert len(outcome) == 1 and isinstance(outcome[0], StoreClosed), outcome
