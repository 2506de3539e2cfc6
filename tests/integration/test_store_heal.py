"""A running store whose topic is recreated heals itself: it rebuilds beside the live copy,
keeps answering from the last complete state meanwhile (readers never see an error, nothing,
or a mix), switches when the rebuild is complete, counts it, and a restart keeps the copy."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, Resync, StoreListener
from globalstore.replicas.heal import BESIDE
from tests.integration.store_support import HeldRestore, create_when_deleted, produce

OLD = {f"k{i:03d}": i for i in range(200)}
# Fewer records than OLD: the new topic ends below the store's position (out of range).
NEW = {f"n{i:03d}": -i for i in range(50)}


class Reader(threading.Thread):
    def __init__(self, store: GlobalStore) -> None:
        super().__init__(daemon=True)
        self.store, self.stop_event = store, threading.Event()
        self.seen: list[str] = []  # "old" / "new" per answer, in order
        self.wrong: list[str] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                answer = self.store.get_many(["k007", "n007"])
            except Exception as exc:
                self.wrong.append(f"{type(exc).__name__}: {exc}")
                continue
            if answer == {"k007": 7}:
                self.seen.append("old")
            elif answer == {"n007": -7}:
                self.seen.append("new")
            else:
                self.wrong.append(repr(answer))


class Gate(StoreListener):
    """Holds the store's thread once it applies the key "sentinel", until let go, so the
    thread cannot meet the recreated topic before the new records are in it (it would
    rightly rebuild from an empty topic, and the test would race the producer)."""

    def __init__(self) -> None:
        self.holding, self.go = threading.Event(), threading.Event()

    def on_changes(self, topic, upserted, deleted) -> None:  # type: ignore[no-untyped-def]
        if "sentinel" in upserted:
            self.holding.set()
            self.go.wait(60)

    def hold(self, bootstrap: str, topic: str) -> None:
        self.holding.clear()
        self.go.clear()
        produce(bootstrap, topic, [("sentinel", {})])
        assert self.holding.wait(60), "the store never applied the sentinel"

    def release(self) -> None:
        self.go.set()


def _recreate(
    admin: AdminClient, bootstrap: str, topic: str, gate: Gate, records: dict[str, int]
) -> None:
    """Delete and recreate `topic` holding `records`, the store held meanwhile."""
    gate.hold(bootstrap, topic)
    try:
        admin.delete_topics([topic])[topic].result(timeout=30)
        create_when_deleted(admin, topic)
        produce(bootstrap, topic, list(records.items()))
    finally:
        gate.release()


def test_a_recreated_topic_is_rebuilt_beside_and_switched_to(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, list(OLD.items()))
    # Every restored batch, the rebuild's too, is held 0.5 s: long enough for the status,
    # sampled every 10 ms below, to be seen saying "rebuilding" however fast the machine.
    held, gate = HeldRestore(0.5), Gate()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[held, gate])
    store.start(60)
    reader = Reader(store)
    reader.start()
    states: set[str] = set()
    try:
        _recreate(kafka_admin, kafka_bootstrap, topic, gate, NEW)
        deadline = time.monotonic() + 60
        while store.status().self_heals == 0:
            states.add(store.status().state)
            assert time.monotonic() < deadline, (states, store.status())
            time.sleep(0.01)
        status = store.status()
        assert status.state == "running" and status.self_heals == 1, status
        count_seen = len(reader.seen)
        while len(reader.seen) < count_seen + 50:
            assert time.monotonic() < deadline, "the reader stopped answering"
            time.sleep(0.01)
    finally:
        reader.stop_event.set()
        reader.join()
        store.close()
    assert not reader.wrong, reader.wrong[:5]
    first_new = reader.seen.index("new")
    assert set(reader.seen[:first_new]) == {"old"} and set(reader.seen[first_new:]) == {"new"}
    assert "rebuilding" in states, states  # status showed it happening

    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as again:
        assert again.status().rebuild_reason is None  # the rebuilt copy was adopted
        assert dict(again.items()) == NEW
    assert not (tmp_path / "s" / BESIDE).exists()


def test_a_store_heals_again_each_time_its_topic_is_recreated(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    # Each generation ends below the last one's position, so each recreate is out of range;
    # the third heal rebuilds where the first one did (the two places take turns).
    generations = [
        {f"g{g}-{i:03d}": i for i in range(size)} for g, size in enumerate((40, 20, 10, 5))
    ]
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, list(generations[0].items()))
    gate = Gate()
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", listeners=[gate])
    with store.start(timeout=30), store.changes() as feed:
        for heals, generation in enumerate(generations[1:], start=1):
            _recreate(kafka_admin, kafka_bootstrap, topic, gate, generation)
            deadline = time.monotonic() + 60
            while store.status().self_heals < heals:
                assert time.monotonic() < deadline, (heals, store.status())
                time.sleep(0.05)
            assert dict(store.items()) == generation, heals
            # The change feed: the sentinel the old copy applied, then one resync for the
            # swap; nothing of the rebuild's restore (it was not what queries read).
            items = list(iter(lambda: feed.get(timeout=0.3), None))
            assert items[-1] == Resync("the store was rebuilt from the topic"), items
            assert {getattr(i, "key", None) for i in items[:-1]} <= {"sentinel"}, items
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as again:
        assert again.status().rebuild_reason is None  # the newest copy was kept
        assert dict(again.items()) == generations[-1]
    assert not (tmp_path / "s" / BESIDE).exists()
