"""Hazards a real deployment meets: each one ends in a rebuild, a clear error, or recovery."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rocksdict
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from globalstore import (
    BrokerUnavailable,
    GlobalStore,
    InvalidValue,
    RocksDBOptions,
    StartTimeout,
    StorageError,
    StoreConfig,
    StoreListener,
    StoreLocked,
    TopicNotCompacted,
    TopicNotFound,
)
from globalstore.codec import VALUE_FORMAT_HEADER
from globalstore.storage import Storage, rocksdb_options
from globalstore.storage.meta import K_LAYOUT
from tests.integration.store_support import (
    create_when_deleted,
    produce,
    produce_raw,
    producer,
    set_topic_config,
)

REBUILD = "rebuilding store"


def _rebuild_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and REBUILD in r.getMessage()
    ]


def _snapshot(store: GlobalStore) -> dict[str, object]:
    return dict(store.items())


def test_deleted_records_below_stored_offsets_force_rebuild(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # delete_records needs the delete policy beside compact (Kafka refuses it on compact only).
    topic = make_topic(partitions=1, config={"cleanup.policy": "compact,delete"})
    produce(kafka_bootstrap, topic, [(f"old{i}", i) for i in range(10)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 10
    produce(kafka_bootstrap, topic, [(f"new{i}", i) for i in range(5)])
    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 12)])
    for f in futures.values():
        f.result(timeout=30)

    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert _snapshot(store) == {"new2": 2, "new3": 3, "new4": 4}
        assert store.count() == 3
        assert store.position() == {0: 15}
    warnings = _rebuild_warnings(caplog)
    assert len(warnings) == 1 and "outside the topic's range" in warnings[0]


def test_recreated_topic_forces_rebuild(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(20)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 20
    kafka_admin.delete_topics([topic])[topic].result(timeout=30)
    create_when_deleted(kafka_admin, topic, partitions=2)
    produce(kafka_bootstrap, topic, [("fresh", 1)])

    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert _snapshot(store) == {"fresh": 1}
        assert store.count() == 1
    assert len(_rebuild_warnings(caplog)) == 1


def test_offline_longer_than_delete_retention_rebuilds(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Back within 10 minutes must resume however slow the close-and-reopen; the retention
    # is shortened below only for the absence that must rebuild.
    topic = make_topic(partitions=1, config={"delete.retention.ms": "600000"})
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 2
    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.status().rebuild_reason is None  # back within the retention: resume
    held_end_at = time.monotonic()
    assert _rebuild_warnings(caplog) == []

    set_topic_config(kafka_admin, topic, "delete.retention.ms", "1000")
    _sleep_until(held_end_at + 2.0)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert _snapshot(store) == {"a": 1, "b": 2}
    warnings = _rebuild_warnings(caplog)
    assert len(warnings) == 1 and "delete.retention.ms" in warnings[0]


class _CrashAfterFirstBatch(StoreListener):
    """Stands for a process killed mid-catch-up: the first batch is written, then it dies."""

    def __init__(self) -> None:
        self.start_offsets: dict[int, int] = {}

    def on_restore_start(self, topic: str, start_offsets, end_offsets) -> None:  # type: ignore[no-untyped-def]
        self.start_offsets = dict(start_offsets)

    def on_batch_restored(self, topic: str, positions, records: int) -> None:  # type: ignore[no-untyped-def]
        raise _CrashError


class _CrashError(Exception):
    """The simulated death of the process."""


def test_an_interrupted_catch_up_does_not_reset_the_retention_clock(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    # The clock of the delete.retention.ms rule starts when the store last held the topic's
    # end. A catch-up that applied some batches and died never held it: away 6 s, a crashed
    # catch-up, then a retention of 4 s -> rebuild. (A long retention until then: the
    # crashed catch-up must resume however slow the machine.)
    topic = make_topic(partitions=1, config={"delete.retention.ms": "600000"})
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    config = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", restore_batch_size=50)
    with GlobalStore.from_config(config) as store:
        assert store.count() == 2
    held_end_at = time.monotonic()
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(500)])
    _sleep_until(held_end_at + 6.0)
    crash = _CrashAfterFirstBatch()
    with pytest.raises(_CrashError):
        GlobalStore.from_config(config, listeners=[crash]).start()
    assert crash.start_offsets == {0: 2}, "the crashed catch-up must have resumed, not rebuilt"
    set_topic_config(kafka_admin, topic, "delete.retention.ms", "4000")
    with GlobalStore.from_config(config) as store:
        reason = store.status().rebuild_reason
        assert reason is not None and "delete.retention.ms" in reason, store.status()
        assert store.count() == 502


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))


def test_uncompacted_topic_is_refused_unless_allowed(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1, compact=False)
    produce(kafka_bootstrap, topic, [("a", 1)])
    store = GlobalStore(topic, kafka_bootstrap, tmp_path / "s")
    with pytest.raises(TopicNotCompacted, match="allow_uncompacted"):
        store.start(timeout=20)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s", allow_uncompacted=True) as store:
        assert store.get("a") == 1


def test_missing_topic_is_a_clear_error(kafka_bootstrap: str, tmp_path: Path) -> None:
    store = GlobalStore("no-such-topic-xyz-42", kafka_bootstrap, tmp_path / "s")
    with pytest.raises(TopicNotFound, match="no-such-topic-xyz-42"):
        store.start(timeout=20)


def test_partitions_added_while_running_are_followed(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1)])
    config = StoreConfig(
        topic=topic, bootstrap_servers=kafka_bootstrap, path=tmp_path / "s", metadata_interval=0.3
    )
    with GlobalStore.from_config(config) as store:
        kafka_admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
        # The broker's metadata shows the new partitions a moment after the call returns;
        # a producer asked for partition 2 before that fails the delivery.
        deadline = time.monotonic() + 60
        while len(kafka_admin.list_topics(topic, timeout=10).topics[topic].partitions) < 3:
            assert time.monotonic() < deadline, "the broker never listed 3 partitions"
            time.sleep(0.05)
        produce(kafka_bootstrap, topic, [("on-p2", 2)], partition=2)  # fails unless delivered
        assert store.wait_for({2: 1}, timeout=60), f"store at {store.status()}"
        assert store.get("on-p2") == 2
        assert {p: o for p, o in store.position().items() if o} == {0: 1, 2: 1}  # 1 is empty
        assert store.count() == 2


def test_broker_down_at_start_names_the_bootstrap(tmp_path: Path) -> None:
    store = GlobalStore("t", "127.0.0.1:1", tmp_path / "s")
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"127\.0\.0\.1:1") as info:
        store.start(timeout=2)
    assert isinstance(info.value, StartTimeout)
    assert time.monotonic() - began < 10
    # The store released its directory, and start() may be retried on the same object.
    Storage(tmp_path / "s").close()
    with pytest.raises(BrokerUnavailable):
        store.start(timeout=1)


def test_two_processes_on_one_directory(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    code = (
        "import sys\nfrom globalstore import GlobalStore, StoreLocked\n"
        f"s = GlobalStore({topic!r}, {kafka_bootstrap!r}, {str(tmp_path / 's')!r})\n"
        "try:\n    s.start(timeout=20)\nexcept StoreLocked as e:\n    print('LOCKED:', e)\n"
        "    sys.exit(3)\nsys.exit(0)\n"
    )
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[2],
            timeout=60,
            check=False,
        )
        with pytest.raises(StoreLocked):
            GlobalStore(topic, kafka_bootstrap, tmp_path / "s").start(timeout=5)
    assert out.returncode == 3, out.stderr
    assert "in use by another process" in out.stdout


@pytest.mark.parametrize("layout", [b"99", b"not-a-number"])
def test_unknown_or_damaged_layout_rebuilds(
    kafka_bootstrap: str,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    layout: bytes,
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1), ("b", 2)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s"):
        pass
    storage = Storage(tmp_path / "s")
    storage.put_meta(K_LAYOUT, layout)
    storage.write_values([(b"a", b"\x63garbage-from-the-future")])
    storage.close()

    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert _snapshot(store) == {"a": 1, "b": 2}
        assert store.status().layout_version == 1
    assert len(_rebuild_warnings(caplog)) == 1


def _flush_to_table_files(path: Path) -> list[Path]:
    """Move what the store holds from its write-ahead log into table (.sst) files."""
    opts = rocksdb_options(RocksDBOptions())
    # Every column family the store has must be opened (RocksDB refuses otherwise).
    db = rocksdict.Rdict(str(path / "db"), opts, column_families={"meta": opts, "index": opts})
    db.flush()
    db.close()
    return sorted((path / "db").glob("*.sst"))


def _corrupt_tail(table: Path, length: int = 200) -> None:
    # The tail of a table file holds its index and properties blocks, which RocksDB reads
    # when it opens the database: their checksums stop matching.
    with table.open("r+b") as f:
        f.seek(-length, 2)
        f.write(b"\x5a" * 60)


def test_a_corrupted_table_file_rebuilds_and_is_never_taken_for_a_lock(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # RocksDB says "Corruption: block checksum mismatch": "block" contains "lock".
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(2000)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s"):
        pass
    tables = _flush_to_table_files(tmp_path / "s")
    assert tables
    for table in tables:
        _corrupt_tail(table)
    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.count() == 2000 and store.get("k1999") == 1999
    damaged = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(damaged) == 1 and "Corruption" in damaged[0], damaged


def test_a_read_error_is_a_storage_error(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i:05d}", "x" * 100) for i in range(20_000)])
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s"):
        pass
    [table] = [t for t in _flush_to_table_files(tmp_path / "s") if t.stat().st_size > 100_000]
    with table.open("r+b") as f:  # a data block in the middle: found only when read
        f.seek(table.stat().st_size // 2)
        f.write(b"\x5a" * 4096)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        errors = []
        for i in range(0, 20_000, 50):
            try:
                store.get(f"k{i:05d}")
            except StorageError as exc:
                errors.append(exc)
        assert errors, "no read reached the damaged block"
        assert "Corruption" in str(errors[0])


def test_invalid_json_is_stored_and_reported_at_query(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("good", 1)])
    produce_raw(kafka_bootstrap, topic, b"bad", b"{not json")
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.get("good") == 1
        assert store.count() == 2
        with pytest.raises(InvalidValue) as info:
            store.get("bad")
        assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 0, 1)
        assert f"topic {topic!r} partition 0 offset 1" in str(info.value)
        # A scan goes past it and reports it with its record.
        errors: list[InvalidValue] = []
        assert dict(store.items(on_invalid=errors.append)) == {"good": 1}
        assert [(e.key, e.partition, e.offset) for e in errors] == [("bad", 0, 1)]
        assert list(store.keys()) == ["bad", "good"]
        produce(kafka_bootstrap, topic, [("bad", {"fixed": True})])
        assert store.wait_for({0: 3}, timeout=10)
        assert store.get("bad") == {"fixed": True}


def test_a_key_that_is_not_utf8_is_reported_and_skipped_never_breaking_a_scan(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [("a", 1)])
    produce_raw(kafka_bootstrap, topic, b"\xff\xfe-latin1-\xe9", b'{"x": 1}')  # offset 1
    produce(kafka_bootstrap, topic, [("z", 2), ("ü-utf8", 3)])
    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert dict(store.items()) == {"a": 1, "z": 2, "ü-utf8": 3}
        assert list(store.keys()) == ["a", "z", "ü-utf8"]
        assert store.count() == 3
        assert store.status().skipped_records == 1
        assert store.position() == {0: 4}  # skipped, not stuck
    skipped = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(skipped) == 1 and f"{topic} partition 0 offset 1" in skipped[0], skipped


def test_value_in_a_newer_format_is_refused_not_misread(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    p = producer(kafka_bootstrap)
    p.produce(topic, key=b"old", value=b'{"v": 1}', headers=[(VALUE_FORMAT_HEADER, b"1")])
    p.produce(topic, key=b"new", value=b'{"v": 2}', headers=[(VALUE_FORMAT_HEADER, b"2")])
    assert p.flush(30) == 0
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.get("old") == {"v": 1}
        with pytest.raises(InvalidValue, match="unknown value format") as info:
            store.get("new")
        assert (info.value.partition, info.value.offset) == (0, 1)
        errors: list[InvalidValue] = []
        assert dict(store.items(on_invalid=errors.append)) == {"old": {"v": 1}}
        assert [e.reason for e in errors] == ["unknown value format"]


def test_topic_recreated_under_a_running_store_set_to_stop_stops_loudly_then_restart_rebuilds(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(20)])
    stop = StoreConfig(topic, kafka_bootstrap, tmp_path / "s", out_of_range="stop")
    store = GlobalStore.from_config(stop).start(timeout=30)
    try:
        kafka_admin.delete_topics([topic])[topic].result(timeout=30)
        create_when_deleted(kafka_admin, topic)
        produce(kafka_bootstrap, topic, [("fresh", 1)])  # offset 0 < the store's position 20
        deadline = time.monotonic() + 60
        while store.status().state != "failed":
            assert time.monotonic() < deadline, store.status()
            time.sleep(0.2)
        report = store.status()
        assert report.last_error is not None and "OffsetsOutOfRange" in report.last_error
        assert store.get("k3") == 3  # the last state is still served, never a partial one
    finally:
        store.close()

    caplog.set_level(logging.WARNING)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert _snapshot(store) == {"fresh": 1}
        assert store.count() == 1
    assert len(_rebuild_warnings(caplog)) == 1
