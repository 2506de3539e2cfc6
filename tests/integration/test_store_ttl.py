"""Time to live against a real broker and real RocksDB: records produced with explicit event
timestamps in the past and recent ones. The expired keys are gone from get, get_many,
items, find and count at once, on both restore loops and while following; the time index
shrinks to the live keys as the purge deletes the expired ones from disk; keys rewritten
with a fresh timestamp stay, keys rewritten with an old one go, and a key that expires
while the store runs is hidden at once, then purged."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from globalstore import GlobalStore, ReadOnlyStore
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.read.protocols import StoreReader
from tests.integration.store_support import producer

TTL = 3600.0  # seconds
HOUR_MS = 3_600_000

Timed = tuple[str, Any, int]  # (key, value or None, event timestamp ms)


def by_courier(key: str, value: Any) -> str | None:
    courier: str | None = value.get("courier")
    return courier


def produce_at(bootstrap: str, topic: str, records: Iterable[Timed]) -> dict[int, int]:
    """Produce records with their own event timestamps (CreateTime); returns {partition:
    offset after the last one written there}."""
    p = producer(bootstrap)
    written: dict[int, int] = {}
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            written[msg.partition()] = max(written.get(msg.partition(), 0), msg.offset() + 1)

    for key, value, ts in records:
        p.produce(topic, key=encode_key(key), value=encode_value(value), timestamp=ts,
                  headers=format_headers(), on_delivery=on_delivery)  # fmt: skip
        p.poll(0)
    assert p.flush(30) == 0 and not failed, failed[:3]
    return written


class Model:
    """The keys the store must show: each key's newest record, unless a tombstone or older
    than the ttl."""

    def __init__(self) -> None:
        self.newest: dict[str, tuple[Any, int]] = {}

    def apply(self, records: Iterable[Timed]) -> None:
        for key, value, ts in records:
            if value is None:
                self.newest.pop(key, None)
            else:
                self.newest[key] = (value, ts)

    def live(self) -> dict[str, Any]:
        cutoff = time.time() * 1000 - TTL * 1000
        return {k: v for k, (v, ts) in sorted(self.newest.items()) if ts >= cutoff}


def assert_shows_the_model(store: StoreReader, model: Model) -> None:
    live = model.live()
    assert dict(store.items()) == live
    assert store.count() == len(live)
    assert store.get_many(list(model.newest)) == live
    for key in list(model.newest)[::7]:
        assert store.get(key) == live.get(key), key
    couriers = {v["courier"] for v in live.values()} | {"c-gone"}
    for courier in sorted(couriers):
        expected = [(k, v) for k, v in live.items() if v["courier"] == courier]
        assert list(store.find("by_courier", courier)) == expected, courier
        assert store.find_count("by_courier", courier) == len(expected)


def history(now: int) -> list[Timed]:
    """Old keys (two hours ago), recent ones, old keys rewritten fresh, fresh keys rewritten
    with an old timestamp (the newest record is what counts), old keys deleted."""
    old, recent = now - 2 * HOUR_MS, now - 60_000
    out: list[Timed] = []
    out += [(f"old-{i:03d}", {"courier": f"c-{i % 5}", "n": i}, old + i) for i in range(300)]
    out += [(f"gone-{i:03d}", {"courier": "c-gone"}, old) for i in range(20)]
    out += [(f"new-{i:03d}", {"courier": f"c-{i % 5}", "n": i}, recent + i) for i in range(100)]
    out += [(f"old-{i:03d}", {"courier": "c-9", "n": -i}, now) for i in range(0, 300, 6)]
    out += [(f"new-{i:03d}", {"courier": "c-1", "n": -i}, old) for i in range(0, 100, 10)]
    out += [(f"gone-{i:03d}", None, now) for i in range(20)]
    return out


def wait_purged(store: GlobalStore, model: Model, purged: int, timeout: float = 30) -> None:
    """Until the time index holds the live keys only, `purged` expired keys having been
    deleted from disk since the start (the store's status counts them a moment after)."""
    deadline = time.monotonic() + timeout
    while True:
        status = store.status().ttl
        assert status is not None and status.time_index_ready
        if status.time_index_entries == len(model.live()) and status.purged == purged:
            return
        assert time.monotonic() < deadline, (status, len(model.live()), purged)
        time.sleep(0.05)


def test_expired_keys_are_gone_at_once_and_purged_on_both_loops(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=3)
    model = Model()
    records = history(int(time.time() * 1000))
    produce_at(kafka_bootstrap, topic, records)
    model.apply(records)
    assert len(model.live()) == 140  # 100 new, 10 of them made old, + 50 old made fresh
    with GlobalStore(
        topic,
        kafka_bootstrap,
        tmp_path / "bulk",
        indexes={"by_courier": by_courier},
        ttl=TTL,
        bulk_restore_threshold=100,  # the C loop where it is built
    ) as store:
        assert_shows_the_model(store, model)  # at once: before any purge
        wait_purged(store, model, 260)  # 250 old keys, 10 new ones rewritten old
        assert_shows_the_model(store, model)
        # While following: old records arrive, a fresh key is rewritten with an old
        # timestamp, and a key that expires five seconds from now.
        now = int(time.time() * 1000)
        soon = now - int(TTL * 1000) + 5_000
        more: list[Timed] = [
            *((f"late-{i:02d}", {"courier": "c-2"}, now - 2 * HOUR_MS) for i in range(30)),
            ("new-001", {"courier": "c-3"}, now - 2 * HOUR_MS),
            ("soon", {"courier": "c-4"}, soon),
            ("old-007", {"courier": "c-4"}, now),
        ]
        written = produce_at(kafka_bootstrap, topic, more)
        model.apply(more)
        assert store.wait_for(written, 30)
        assert store.get("soon") == {"courier": "c-4"} and store.get("old-007") is not None
        assert store.get("late-00") is None and store.get("new-001") is None
        assert_shows_the_model(store, model)
        time.sleep(max(0.0, (soon + int(TTL * 1000)) / 1000 - time.time()) + 0.1)
        assert store.get("soon") is None and "soon" not in dict(store.items())
        assert_shows_the_model(store, model)
        wait_purged(store, model, 260 + 32)  # 30 late ones, new-001 and soon
    # The Python loop (an exact restore, record by record) writes the same time index.
    with GlobalStore(
        topic,
        kafka_bootstrap,
        tmp_path / "python",
        indexes={"by_courier": by_courier},
        ttl=TTL,
        native_restore=False,
    ) as store:
        assert_shows_the_model(store, model)
        wait_purged(store, model, 260 + 32 - 1)  # the same, but old-007 is fresh by now
    with ReadOnlyStore(tmp_path / "bulk") as files:  # another process knows the ttl too
        assert_shows_the_model(files, model)
