"""Self-healing: a store that lost its position is rebuilt beside the live copy, which keeps
serving, and swapped in at one instant; at start, of the store and a copy rebuilt beside it,
the one whose restore completed last is kept; an incomplete rebuild never replaces anything."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rocksdict import DbClosedError

from globalstore.config import StoreConfig
from globalstore.follow.plan import Plan
from globalstore.follow.prepare import Prepared
from globalstore.follow.thread import StoreThread, ThreadStatus
from globalstore.replicas.heal import BESIDE, Healer, Replica, adopt_rebuilt
from globalstore.replicas.live import Live
from globalstore.shaping.migrate import Migration
from globalstore.status import Progress, State
from globalstore.storage import Storage
from tests.unit.follow.test_thread import _eventually
from tests.unit.store_fakes import FakeConsumer, batch, messages


def _store(path: Path, key: str, restored_at: int | None) -> None:
    s = Storage(path)
    s.initialise("t", None, 0)
    s.apply(batch((key, "1")), {}, True, 1)
    if restored_at is not None:
        s.mark_restored(restored_at)
    s.close()


def _keys(path: Path) -> list[bytes]:
    s = Storage(path)
    try:
        adopt_rebuilt(s)
        return [k for k, _ in s.scan(None, None, False)]
    finally:
        s.close()


def test_a_complete_rebuild_is_adopted(tmp_path: Path) -> None:
    _store(tmp_path, "old", 2)
    _store(tmp_path / BESIDE, "new", 3)
    assert _keys(tmp_path) == [b"new"]
    assert not (tmp_path / BESIDE).exists()


def test_an_interrupted_rebuild_is_dropped(tmp_path: Path) -> None:
    _store(tmp_path, "old", 2)
    _store(tmp_path / BESIDE, "new", None)  # killed before it reached its end offsets
    assert _keys(tmp_path) == [b"old"]
    assert not (tmp_path / BESIDE).exists()


def test_a_crash_half_way_through_adopting_is_finished_at_the_next_start(tmp_path: Path) -> None:
    _store(tmp_path / BESIDE, "new", 3)  # the old copy was removed, the new not yet moved
    assert _keys(tmp_path) == [b"new"]


def test_a_second_heal_rebuilt_in_the_store_itself_keeps_it(tmp_path: Path) -> None:
    # The first heal's copy beside (restored at 3) was replaced by a second heal, which took
    # turns and rebuilt in the store's own directory (restored at 5).
    _store(tmp_path / BESIDE, "first heal", 3)
    _store(tmp_path, "second heal", 5)
    assert _keys(tmp_path) == [b"second heal"]
    assert not (tmp_path / BESIDE).exists()


def test_a_second_heal_killed_half_way_leaves_the_first_ones_copy(tmp_path: Path) -> None:
    _store(tmp_path / BESIDE, "first heal", 3)
    _store(tmp_path, "second heal, incomplete", None)
    assert _keys(tmp_path) == [b"first heal"]


# -- the heal itself, driven by fake consumers (no broker) ----------------------------------


def _thread_over(consumer: FakeConsumer, config: StoreConfig, storage: Storage) -> StoreThread:
    ends = {p: len(records) for p, records in consumer.partitions.items()}

    def prepare(_consumer: Any, _stopped: threading.Event, _retry: object) -> Prepared:
        if storage.read_meta().layout is None:
            storage.initialise(config.topic, None, 0)
        storage.load(storage.read_meta())
        migration = Migration(storage, config.value_formats(), config.topic)
        return Prepared(Plan(dict.fromkeys(ends, 0), ends, True), migration)

    return StoreThread(config, storage, consumer_factory=lambda _conf: consumer, prepare=prepare)


def test_a_lost_position_is_rebuilt_beside_and_swapped_in_at_one_instant(tmp_path: Path) -> None:
    config = StoreConfig("t", "fake:1", tmp_path, poll_timeout=0.005, native_restore=False)
    old = FakeConsumer("t", {0: messages(("k", "old"), ("gone", "x"))})
    new = FakeConsumer("t", {0: messages(("k", "new"))})  # the topic, recreated
    first = Storage(tmp_path)
    live = Live(Replica(first, _thread_over(old, config, first)))
    made: list[Path] = []

    def rebuild_thread(cfg: StoreConfig, storage: Storage) -> StoreThread:
        made.append(storage.path)
        return _thread_over(new, cfg, storage)

    swapped = threading.Event()
    healer = Healer(config, live, rebuild_thread, swapped.set)
    live.current.thread.start()
    healer.start()
    assert live.current.thread.ready.wait(10)
    served = live.current
    held = live.scan(lambda replica: replica.storage.scan(None, None, False))
    try:
        assert next(held)[0] == b"gone"  # a scan open on the old copy across the swap
        old.out_of_range = 0
        _eventually(lambda: live.current is not served, "the rebuilt copy swapped in")
        assert made == [tmp_path / BESIDE] and live.current.storage.path == tmp_path / BESIDE
        assert live.current.lookup(b"gone") is None and live.current.lookup(b"k") is not None
        assert live.current.thread.status.state is State.RUNNING
        assert swapped.wait(10) and healer.heals == 1  # a swap never waits for a scan
        assert [key for key, _ in held] == [b"k"]  # which still sees its copy as it was
        assert served.lookup(b"gone") is not None  # retired: open until the next swap or close
    finally:
        held.close()
        healer.stop()
        healer.join()
        live.close()
    with pytest.raises(DbClosedError):  # the retired copy closed with the live one
        served.lookup(b"gone")


def test_a_scan_reads_its_copy_to_the_end_while_two_heals_are_asked_for(tmp_path: Path) -> None:
    """The first heal swaps under the scan; the second needs the directory the scan reads
    (heals take turns between two places), so it waits for the scan to end, then runs."""
    config = StoreConfig("t", "fake:1", tmp_path, poll_timeout=0.005, native_restore=False)
    keys = [f"k{i:05d}" for i in range(20_000)]
    topics = [FakeConsumer("t", {0: messages(*((k, f"gen{g}") for k in keys))}) for g in range(3)]
    first = Storage(tmp_path)
    live = Live(Replica(first, _thread_over(topics[0], config, first)))
    rebuilds = iter(topics[1:])
    swaps: list[Path] = []
    healer = Healer(config, live, lambda cfg, storage: _thread_over(next(rebuilds), cfg, storage),
                    lambda: swaps.append(live.current.storage.path))  # fmt: skip
    live.current.thread.start()
    healer.start()
    held = None
    try:
        assert live.current.thread.ready.wait(10)
        held = live.scan(lambda replica: replica.storage.scan(None, None, False))
        began = [next(held) for _ in range(10)]
        topics[0].out_of_range = 0  # the first heal: rebuilt beside, swapped in
        _eventually(lambda: len(swaps) == 1, "the first heal")
        _eventually(lambda: live.current.thread.status.state is State.RUNNING, "following")
        topics[1].out_of_range = 0  # the second: it rebuilds where the scan reads
        _eventually(lambda: not live.current.thread.is_alive(), "the second heal asked for")
        time.sleep(0.3)  # the healer is at the second rebuild's directory by now
        rest = list(held)
        assert [k for k, _ in began + rest] == [k.encode() for k in keys]
        assert {v[-4:] for _, v in began + rest} == {b"gen0"}  # exact, all of its own copy
        _eventually(lambda: len(swaps) == 2, "the second heal, once the scan ended")
        assert swaps == [tmp_path / BESIDE, tmp_path]
        _eventually(lambda: (live.current.lookup(b"k00007") or b"").endswith(b"gen2"), "gen2")
    finally:
        if held is not None:
            held.close()
        healer.stop()
        healer.join()
        live.close()


def test_a_rebuild_beside_the_store_reports_its_progress(tmp_path: Path) -> None:
    class Rebuilding:  # the rebuild's thread, as far as the healer reads it
        status = ThreadStatus(progress=Progress("restore", 5, 20, 15, 1.0, 15.0, 5.0))

    healer = Healer(StoreConfig("t", "f:1", tmp_path), None, None, lambda: None)  # type: ignore[arg-type]
    assert healer.progress is None
    healer._rebuild, healer.rebuilding = Rebuilding(), True  # type: ignore[assignment]
    progress = healer.progress
    assert progress is not None and (progress.phase, progress.left) == ("rebuild", 15)
