"""The store thread's loop, driven by a fake consumer (no broker): restore to the planned end
offsets, then follow; new partitions picked up; a lost position fails the thread and leaves
the data it holds; so does a full disk, whose error then holds no handle on the database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from globalstore.config import StoreConfig
from globalstore.errors import OffsetsOutOfRange, StorageError
from globalstore.follow.delays import RECENT_BATCHES, FollowedBatch
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.thread import StoreThread
from globalstore.shaping.migrate import Migration
from globalstore.status import Delays, State
from globalstore.storage import Storage
from tests.unit.store_fakes import NO_SPACE, FakeConsumer, FullDisk, Msg, messages

TOPIC = "t"
NO_DELAYS = Delays((), (), 0, 0.0)


def _config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(
        TOPIC, "fake:1", tmp_path, metadata_interval=0.02, poll_timeout=0.005, native_restore=False
    )


def _eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path)
    s.initialise(TOPIC, None, 0)
    s.load(s.read_meta())
    yield s
    s.close()


def _thread(
    storage: Storage, consumer: FakeConsumer, ends: dict[int, int], exact: bool = True
) -> StoreThread:
    """A thread whose preparation planned a restore of every partition from 0 to `ends`."""
    config = _config(storage.path)

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        migration = Migration(storage, config.value_formats(), TOPIC)
        migration.begin()
        return Prepared(Plan(dict.fromkeys(ends, 0), ends, exact), migration)

    return StoreThread(config, storage, consumer_factory=lambda _conf: consumer, prepare=prepare)


def test_the_loop_restores_to_the_end_offsets_then_follows(storage: Storage) -> None:
    consumer = FakeConsumer(
        TOPIC, {0: messages(("a", "1"), ("b", "2")), 1: messages(("c", "3"), p=1)}
    )
    thread = _thread(storage, consumer, {0: 2, 1: 1})
    thread.start()
    try:
        assert thread.ready.wait(10) and thread.status.state is State.RUNNING
        assert dict(storage.state.positions) == {0: 2, 1: 1} and storage.state.count == 3
        consumer.partitions[0] += messages(("a", None), ("d", "4"), start=2)  # produced later
        _eventually(lambda: storage.state.positions.get(0) == 4, "the new records applied")
        assert storage.get(b"a") is None and storage.get(b"d") is not None
        assert storage.state.count == 3
    finally:
        thread.stop()
        thread.join()
    assert thread.status.state is State.CLOSED and consumer.closed


def test_a_bulk_restore_is_recounted_once_ready(storage: Storage) -> None:
    consumer = FakeConsumer(
        TOPIC, {0: messages(*((f"k{i}", "v") for i in range(50)), ("k0", None))}
    )
    thread = _thread(storage, consumer, {0: 51}, exact=False)
    thread.start()
    try:
        assert thread.ready.wait(10)
        _eventually(lambda: storage.state.count is not None, "the keys counted")
        assert storage.state.count == 49
    finally:
        thread.stop()
        thread.join()


def test_partitions_added_while_following_are_picked_up(storage: Storage) -> None:
    consumer = FakeConsumer(TOPIC, {0: messages(("a", "1"))})
    thread = _thread(storage, consumer, {0: 1})
    thread.start()
    try:
        assert thread.ready.wait(10)
        consumer.partitions[1] = messages(("new", "1"), p=1)  # the topic grew
        _eventually(lambda: thread.status.high.get(1) == 1, "partition 1's end reached")
        assert storage.get(b"new") is not None and storage.state.positions[1] == 1
    finally:
        thread.stop()
        thread.join()


def test_a_lost_position_fails_the_thread_and_keeps_the_data(storage: Storage) -> None:
    consumer = FakeConsumer(TOPIC, {0: messages(("a", "1"))})
    thread = _thread(storage, consumer, {0: 1})
    thread.start()
    assert thread.ready.wait(10)
    consumer.out_of_range = 0  # records deleted, or the topic recreated
    thread.join(10)
    assert not thread.is_alive() and thread.status.state is State.FAILED
    assert isinstance(thread.status.error, OffsetsOutOfRange)
    assert thread.status.restored_at_ms is not None and storage.get(b"a") is not None


def test_a_full_disk_fails_the_thread_keeps_reads_and_lets_go_of_the_database(
    storage: Storage, tmp_path: Path
) -> None:
    consumer = FakeConsumer(TOPIC, {0: messages(("a", "1"))})
    thread = _thread(storage, consumer, {0: 1})
    thread.start()
    assert thread.ready.wait(10)
    storage._db = FullDisk(storage._db)  # type: ignore[assignment]  # the disk is full now
    consumer.partitions[0] += messages(("b", "2"), start=1)
    thread.join(10)
    assert not thread.is_alive() and thread.status.state is State.FAILED
    assert isinstance(thread.status.error, StorageError)
    assert NO_SPACE in str(thread.status.error) and " MiB free of " in str(thread.status.error)
    assert storage.get(b"a") is not None  # reads answer from what is stored
    assert not thread.status.connected  # it follows nothing now: its staleness grows
    storage.close()
    # The error is kept for status(), and no frame it passed through holds RocksDB open.
    Storage(tmp_path).close()


def test_status_tells_how_far_the_restore_is_and_nothing_once_ready(storage: Storage) -> None:
    consumer = FakeConsumer(TOPIC, {0: messages(*((f"k{i}", "v") for i in range(4)))})
    thread = _thread(storage, consumer, {0: 10})  # the end is further than the topic holds yet
    thread.start()
    try:
        _eventually(lambda: storage.state.positions.get(0) == 4, "the first records applied")
        _eventually(lambda: thread.status.progress is not None, "progress published")
        progress = thread.status.progress
        assert progress is not None and thread.status.state is State.RESTORING
        assert (progress.phase, progress.done, progress.total, progress.left) == (
            "restore", 4, 10, 6,
        )  # fmt: skip
        consumer.partitions[0] += messages(*((f"m{i}", "v") for i in range(6)), start=4)
        assert thread.ready.wait(10) and thread.status.state is State.RUNNING
        assert thread.status.progress is None
    finally:
        thread.stop()
        thread.join()


def test_the_batches_followed_are_listed_when_the_readers_are_woken(storage: Storage) -> None:
    old = int(time.time() * 1000) - 90_000
    consumer = FakeConsumer(TOPIC, {0: [Msg(b"a", b"1", 0, 0, ts=old)]})
    thread = _thread(storage, consumer, {0: 1})
    seen: list[tuple[FollowedBatch, ...]] = []
    thread.on_applied = lambda: seen.append(thread.recent_batches)  # where the note is built
    thread.start()
    try:
        assert thread.ready.wait(10)
        assert thread.recent_batches == ()  # restored: no batch followed yet
        stamps = []
        for offset in range(1, RECENT_BATCHES + 3):
            stamps.append(int(time.time() * 1000))
            consumer.partitions[0].append(Msg(b"b", b"2", 0, offset, ts=stamps[-1]))
            _eventually(lambda n=offset: len(seen) > 0 and len(seen[-1]) > 0 and
                        seen[-1][-1].number == n, f"batch {offset} listed")  # fmt: skip
        # Numbered 1, 2, ... with their oldest record's time; the newest RECENT_BATCHES.
        expected = [FollowedBatch(n, stamps[n - 1], 1) for n in range(3, RECENT_BATCHES + 3)]
        assert list(seen[-1]) == expected
    finally:
        thread.stop()
        thread.join()


def test_records_followed_are_counted_by_delay_not_those_restored(storage: Storage) -> None:
    old = int(time.time() * 1000) - 90_000  # restored records are as old as the topic
    consumer = FakeConsumer(TOPIC, {0: [Msg(b"a", b"1", 0, 0, ts=old)]})
    thread = _thread(storage, consumer, {0: 1})
    thread.start()
    try:
        assert thread.ready.wait(10)
        fresh = int(time.time() * 1000)
        consumer.partitions[0] += [Msg(b"b", b"2", 0, 1, ts=fresh), Msg(b"c", b"3", 0, 2, ts=fresh)]
        _eventually(lambda: storage.state.positions.get(0) == 3, "the new records applied")
        _eventually(lambda: (thread.status.delays or NO_DELAYS).total == 2, "delays counted")
        delays = thread.status.delays
        assert delays is not None and delays.sum_seconds < 2 * 5.0  # not 90 s each
    finally:
        thread.stop()
        thread.join()
