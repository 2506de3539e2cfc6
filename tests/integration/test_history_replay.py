"""Reads as of a time on a real broker, checked against an independent replay of what was
produced (history_replay.py: three partitions, tombstones, timestamps that go backwards, a
key moved to another partition, a committed and an aborted transaction): get, get_many,
items, keys and the index reads (find, find_matches, find_count, a view) as of many times,
on every face (GlobalStore with either follower, SharedStore, ReadOnlyStore, the async
face), then after a kill -9 of the writer mid-follow and its warm restart, a purge of a
short window, a heal, and a boot from a peer's snapshot."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from globalstore import GlobalStore, ReadOnlyStore, SharedStore, end_offsets
from globalstore.aio import AsyncGlobalStore
from globalstore.storage import Storage
from globalstore.storage.versions import PREFIX
from globalstore.stores.global_store import Follower
from tests.conftest import TopicFactory
from tests.integration.history_replay import (
    HOUR,
    INDEXES,
    Replay,
    check_as_of,
    check_refused_before,
    produce_workload,
)
from tests.integration.store_support import create_when_deleted
from tests.integration.test_serve_snapshot import _Starts
from tests.integration.test_shared_store_writer import _writers
from tests.integration.test_store_heal import Gate
from tests.snapshot_peer import Peer, snapshot_bytes

PARTITIONS = 3


def _oldest_ms(store: Any) -> int:
    """The oldest time (ms) `store` answers as of now."""
    history = store.status().history
    assert history is not None
    return int(history.oldest * 1000) + 1


def _caught_up(store: Any, bootstrap: str, topic: str) -> None:
    assert store.wait_for(end_offsets(bootstrap, topic), timeout=60)


def _answers_from_its_new_start(
    store: Any, bootstrap: str, topic: str, replay: Replay, rng: random.Random, before_ms: int
) -> None:
    """After what starts a store's horizon again (a warm restart, a heal, a boot from a
    snapshot): it answers from its own start on, after `before_ms`, refuses older times,
    and, once more records come, answers every time since as the replay does (a key not
    written since with its version from before)."""
    own = _oldest_ms(store)
    assert own > before_ms
    check_refused_before(store, own)
    produce_workload(bootstrap, topic, PARTITIONS, replay, rng, own + 1_000)
    _caught_up(store, bootstrap, topic)
    check_as_of(store, replay, replay.times(rng, own, 25), functions=True)


@pytest.mark.parametrize("face", ["thread", "process", "shared", "read-only", "async"])
def test_reads_as_of_a_time_equal_a_replay_on_every_face(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, face: str
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng, replay, path = random.Random(face), Replay(), tmp_path / "s"
    if face == "async":
        asyncio.run(_async_face(kafka_bootstrap, topic, path, rng))
        return
    follower: Follower = "process" if face in ("process", "shared") else "thread"
    with GlobalStore(topic, kafka_bootstrap, path, history=HOUR, indexes=INDEXES,
                     follower=follower) as own:  # fmt: skip
        start = _oldest_ms(own)
        produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, start + 1_000)
        _caught_up(own, kafka_bootstrap, topic)
        times = replay.times(rng, start, 25)
        check_refused_before(own, start)
        if face == "shared":  # a reader of the writer process's copy, given the functions
            with SharedStore(path, indexes=INDEXES).start(timeout=60) as shared:
                _caught_up(shared, kafka_bootstrap, topic)
                check_as_of(shared, replay, times, functions=True)
        elif face != "read-only":
            check_as_of(own, replay, times, functions=True)
    if face == "read-only":
        with ReadOnlyStore(path) as files:  # the declared index: recorded in the store
            check_as_of(files, replay, times)


async def _async_face(bootstrap: str, topic: str, path: Path, rng: random.Random) -> None:
    replay = Replay()
    async with AsyncGlobalStore(topic, bootstrap, path, history=HOUR, indexes=INDEXES) as store:
        start = _oldest_ms(store)
        await asyncio.to_thread(
            produce_workload, bootstrap, topic, PARTITIONS, replay, rng, start + 1_000
        )
        assert await store.wait_for(end_offsets(bootstrap, topic), timeout=60)
        check_as_of(store, replay, replay.times(rng, start, 25), functions=True)


def test_after_a_kill_9_of_the_writer_mid_follow_and_its_warm_restart(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng, replay = random.Random(9), Replay()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, indexes=INDEXES,
                     follower="process") as store:  # fmt: skip
        start = _oldest_ms(store)
        (writer,) = _writers()
        producing = threading.Thread(
            target=produce_workload,
            args=(kafka_bootstrap, topic, PARTITIONS, replay, random.Random(10), start + 1_000),
        )
        producing.start()
        deadline = time.monotonic() + 60
        while sum(store.position().values()) < 30:  # it is following the records
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(writer, signal.SIGKILL)
        producing.join()
        deadline = time.monotonic() + 60
        while _writers() in (set(), {writer}):  # another writer, which resumes warm
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _caught_up(store, kafka_bootstrap, topic)
        _answers_from_its_new_start(store, kafka_bootstrap, topic, replay, rng, start)


def test_after_a_purge_of_a_short_window(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng, replay, window = random.Random(4), Replay(), 8.0
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=window,
                     indexes=INDEXES) as store:  # fmt: skip
        produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, _now_ms() - 1_500)
        _caught_up(store, kafka_bootstrap, topic)
        # The first records leave the window, and a sweep (each second) purges them.
        time.sleep(max(0.0, (max(r.ts for r in replay.records) + window * 1000 - _now_ms())
                       / 1000) + 1.5)  # fmt: skip
        # A minute ahead (a producer's clock may be): inside the window at the checks
        # however long producing takes on a loaded machine.
        produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, _now_ms() + 60_000)
        _caught_up(store, kafka_bootstrap, topic)
        oldest = _oldest_ms(store) + 2_000  # the window moves on while the checks run
        check_refused_before(store, _oldest_ms(store))
        # Keys not written since answer with the versions the purge kept.
        check_as_of(store, replay, replay.times(rng, oldest, 25), functions=True)
    storage = Storage(tmp_path / "s", read_only=True)
    try:
        assert storage.index is not None
        kept = sum(1 for _ in storage.index.keys(PREFIX, b"i", 10**9))
    finally:
        storage.close()
    assert kept < len(replay.records)  # the purge removed versions


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_after_a_heal(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng, before, replay, gate = random.Random(5), Replay(), Replay(), Gate()
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, indexes=INDEXES,
                     listeners=[gate]) as store:  # fmt: skip
        start = _oldest_ms(store)
        produce_workload(kafka_bootstrap, topic, PARTITIONS, before, rng, start + 1_000)
        _caught_up(store, kafka_bootstrap, topic)
        # The topic recreated with fewer records: the store's offsets are out of its range,
        # and it rebuilds from it beside the live copy, then switches.
        gate.hold(kafka_bootstrap, topic)
        try:
            kafka_admin.delete_topics([topic])[topic].result(timeout=30)
            create_when_deleted(kafka_admin, topic, PARTITIONS)
            produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, _now_ms(), n=20)
        finally:
            gate.release()
        deadline = time.monotonic() + 60
        while store.status().self_heals == 0:
            assert time.monotonic() < deadline, store.status()
            time.sleep(0.05)
        _answers_from_its_new_start(store, kafka_bootstrap, topic, replay, rng, start)


def test_after_a_snapshot_boot(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    rng, replay = random.Random(6), Replay()
    settings: dict[str, Any] = {"history": HOUR, "indexes": INDEXES}
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "peer", **settings) as peer:
        start = _oldest_ms(peer)
        produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, start + 1_000)
        _caught_up(peer, kafka_bootstrap, topic)
        peer.checkpoint(tmp_path / "checkpoint")
    with Peer() as server:
        server.serve(snapshot_bytes(tmp_path / "checkpoint"))
        starts = _Starts()
        booted = GlobalStore(topic, kafka_bootstrap, tmp_path / "s", **settings,
                             bootstrap_from=server.url(), listeners=[starts])  # fmt: skip
        with booted.start(timeout=60):
            assert starts.to_read == [0]  # it resumed from the snapshot
            _answers_from_its_new_start(booted, kafka_bootstrap, topic, replay, rng, start)


@pytest.mark.parametrize("batch", [7, 10_000], ids=["across-batches", "one-batch"])
@pytest.mark.parametrize("follower", ["thread", "process"])
def test_a_cold_restore_writes_the_versions_a_follower_would(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path, batch: int, follower: Follower
) -> None:
    """Records produced before the store starts, timestamped after its start (a producer's
    clock ahead): the bulk restore into the empty store writes them, reading the old value
    only of a key it wrote before (in an earlier batch of 7 records, or in the same one),
    and every time after its start answers as the replay does."""
    topic = make_topic(partitions=PARTITIONS)
    rng, replay = random.Random(f"cold-{batch}"), Replay()
    produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, _now_ms() + 60_000)
    # bulk_restore_threshold=0: a bulk restore, however few the records.
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, indexes=INDEXES,
                     follower=follower, restore_batch_size=batch,
                     bulk_restore_threshold=0) as store:  # fmt: skip
        _caught_up(store, kafka_bootstrap, topic)
        assert store.status().last_restore_at is not None
        start = _oldest_ms(store)
        check_as_of(store, replay, replay.times(rng, start, 25), functions=follower == "thread")


def test_a_ttl_purge_keeps_what_a_read_before_the_expiry_answers(
    kafka_bootstrap: str, make_topic: TopicFactory, tmp_path: Path
) -> None:
    """The ttl's purge deletes expired values from the data: the ones that are a key's
    current value (and so its newest version) are kept as versions, and reads as of a time
    before their expiry answer as the replay does (with the ttl judged at that time)."""
    topic = make_topic(partitions=PARTITIONS)
    rng, replay, ttl = random.Random(8), Replay(), 3.0
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", history=HOUR, ttl=ttl,
                     indexes=INDEXES) as store:  # fmt: skip
        start = _oldest_ms(store)
        produce_workload(kafka_bootstrap, topic, PARTITIONS, replay, rng, start + 500, n=60)
        _caught_up(store, kafka_bootstrap, topic)
        deadline = time.monotonic() + 60
        while (status := store.status().ttl) is None or status.time_index_entries:
            assert time.monotonic() < deadline, status  # until every key expired and purged
            time.sleep(0.2)
        assert status.purged > 0
        for t_ms in replay.times(rng, start, 25):
            want = {k: v for k, (v, ts) in _winners(replay, t_ms).items()
                    if v is not None and ts >= t_ms - ttl * 1000}  # fmt: skip
            assert dict(store.items(as_of=t_ms / 1000)) == want, t_ms
            assert {k: store.get(k, as_of=t_ms / 1000) for k in want} == want, t_ms
        assert any(_winners(replay, t) for t in replay.times(rng, start, 5))  # not vacuous


def _winners(replay: Replay, t_ms: int) -> dict[str, tuple[Any, int]]:
    """{key: (value, its record's timestamp)} as of `t_ms`, by the replay's rule."""
    out: dict[str, tuple[Any, int]] = {}
    for key in sorted({r.key for r in replay.records}):
        last = {r.partition: r for r in replay.records if r.key == key and r.ts <= t_ms}
        if last:
            won = max(last.values(), key=lambda r: (r.ts, r.partition))
            out[key] = (won.value, won.ts)
    return out
