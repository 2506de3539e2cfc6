"""The C restore loop writes exactly what the Python loop writes, record for record: the same
stored bytes (layout header with format, timestamp, partition, offset), the same offsets, the
same skipped keys, over every kind of record a topic can hold. Then the store follows from
where the C loop stopped, through its own consumer."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from globalstore import GlobalStore, Shape, StoreConfig, StoreListener
from globalstore.codec import VALUE_FORMAT_HEADER, format_headers
from globalstore.follow import native as native_restore
from globalstore.follow.topic import end_offsets
from globalstore.storage import Storage
from globalstore.storage.versions import PREFIX
from tests.integration.store_support import produce, producer

PARTITIONS = 3
DECLARED = format_headers()


def value(i: int) -> bytes:
    return orjson.dumps({"i": i, "pad": "x" * 50})


# (key, value, headers): every shape of record the loops tell apart. (No key-less record: a
# broker refuses the whole batch holding one for a compacted topic.)
ODD_RECORDS: list[tuple[bytes, bytes | None, Any]] = [
    (b"no-headers", value(1), None),
    (b"format-2", value(2), [(VALUE_FORMAT_HEADER, b"2")]),
    (b"format-unreadable", value(3), [(VALUE_FORMAT_HEADER, b"abc")]),
    (b"format-null", value(4), [(VALUE_FORMAT_HEADER, None)]),
    (b"format-and-more", value(5), [("trace", b"t-1"), *DECLARED]),
    (b"format-twice", value(6), [(VALUE_FORMAT_HEADER, b"2"), *DECLARED]),
    (b"empty-value", b"", DECLARED),
    ("ключ".encode(), value(7), DECLARED),  # UTF-8, not ASCII: kept
    (b"\xff\xfenot-utf8", value(8), DECLARED),  # skipped and reported
    (b"deleted", value(10), DECLARED),
    (b"deleted", None, DECLARED),
]


# Spread over the partitions, one key in one partition (the topic contract): a key split
# over two has no defined last value, so the loops could end it differently and both be right.
ODD_PARTITIONS = {
    key: n % PARTITIONS for n, key in enumerate(dict.fromkeys(k for k, _, _ in ODD_RECORDS))
}


def fill_topic(bootstrap: str, topic: str) -> None:
    """Plain records on every partition, the odd ones, then a committed and an aborted
    transaction (markers and aborted records the loops must step over)."""
    produce(bootstrap, topic, ((f"k{i:05d}", {"i": i}) for i in range(3_000)))
    p = producer(bootstrap)
    failed: list[Any] = []
    for key, val, headers in ODD_RECORDS:
        p.produce(
            topic,
            key=key,
            value=val,
            headers=headers,
            partition=ODD_PARTITIONS[key],
            on_delivery=lambda err, _: failed.append(err) if err else None,
        )
    assert p.flush(30) == 0 and not failed, failed
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    tx.init_transactions(30)
    for commit in (True, False):
        tx.begin_transaction()
        for i in range(300):
            tx.produce(topic, key=f"k{i:05d}".encode(), value=value(-i), headers=DECLARED)
        assert tx.flush(30) == 0
        (tx.commit_transaction if commit else tx.abort_transaction)(30)


def restore(
    bootstrap: str, topic: str, path: Path, native: bool, **settings: Any
) -> dict[str, Any]:
    """Cold-restore (bulk path) and return what the store wrote, byte for byte. `settings`
    are more StoreConfig fields."""
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=bootstrap,
        path=path,
        bulk_restore_threshold=0,  # every restore takes the bulk path the C loop serves
        native_restore=native,
        **settings,
    )
    with GlobalStore.from_config(config) as store:
        status = store.status()
    storage = Storage(path, read_only=True)
    try:
        return {
            "values": dict(storage.keys_from(None, 1 << 20)),
            "offsets": storage.read_meta().offsets,
            "skipped": status.skipped_records,
            "transform_failures": status.transform_failures,
            # A store with history: its versions (and any other index entry).
            "index": [] if storage.index is None else list(storage.index.items_from(b"")),
        }
    finally:
        storage.close()


def test_the_c_loop_is_built_here() -> None:
    """CI builds the package with a C compiler: the C loop must be there to be tested."""
    assert native_restore.load() is None


def test_c_loop_writes_what_the_python_loop_writes(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    fill_topic(kafka_bootstrap, topic)
    with caplog.at_level(logging.INFO, logger="globalstore.follow.native_source"):
        by_c = restore(kafka_bootstrap, topic, tmp_path / "c", native=True)
    assert f"restoring {topic} with the C loop" in caplog.text
    by_python = restore(kafka_bootstrap, topic, tmp_path / "py", native=False)

    assert by_c["offsets"] == by_python["offsets"] == end_offsets(kafka_bootstrap, topic)
    assert by_c["skipped"] == by_python["skipped"] == 1
    assert by_c["values"].keys() == by_python["values"].keys()
    differ = [k for k in by_c["values"] if by_c["values"][k] != by_python["values"][k]]
    assert not differ, f"{len(differ)} stored values differ, e.g. {differ[:3]}"
    # The oracle is not vacuous: the odd records are there, in the formats they declared.
    stored = by_c["values"]
    assert b"deleted" not in stored and b"\xff\xfenot-utf8" not in stored
    assert {stored[k][1] for k in (b"format-2", b"format-twice")} == {2}
    assert stored[b"format-unreadable"][1] == stored[b"format-null"][1] == 255
    assert stored[b"empty-value"][22:] == b"" and "ключ".encode() in stored
    assert orjson.loads(stored[b"k00007"][22:]) == orjson.loads(value(-7))  # committed


def odd_shape(key: str, value: Any) -> Any:
    """A transform that raises on some values, drops others and projects the rest."""
    if value["i"] % 7 == 0:
        raise ValueError(f"not {value['i']}")
    return None if value["i"] % 3 == 0 else {"i": value["i"], "key": key}


def test_c_loop_transforms_what_the_python_loop_transforms(
    kafka_bootstrap: str, make_topic, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    fill_topic(kafka_bootstrap, topic)
    with caplog.at_level(logging.INFO, logger="globalstore.follow.native_source"):
        by_c = restore(kafka_bootstrap, topic, tmp_path / "c", True, transform=odd_shape)
    assert f"restoring {topic} with the C loop, transforming each value in Python" in caplog.text
    by_python = restore(kafka_bootstrap, topic, tmp_path / "py", False, transform=odd_shape)

    assert by_c == by_python
    assert by_c["offsets"] == end_offsets(kafka_bootstrap, topic) and by_c["skipped"] == 1
    assert by_c["transform_failures"] == 429 + 43 + 1  # i % 7 == 0: plain, committed, odd
    stored = by_c["values"]
    assert orjson.loads(stored[b"k00008"][22:]) == {"i": -8, "key": "k00008"}  # committed
    assert b"k00009" not in stored and b"k00006" not in stored  # dropped: -9 % 3, -6 % 3
    assert orjson.loads(stored[b"k00302"][22:]) == {"i": 302, "key": "k00302"}
    assert b"k00301" not in stored and "ключ".encode() not in stored  # raised on: 301, 7
    assert stored[b"empty-value"][22:] == b"" and stored[b"format-2"][1] == 2  # as they came


# Keeps the padded values (the odd records, the transactions'), drops the others.
PADDED = Shape(fields=["i"], where={"pad": ["x" * 50]})


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"transform": odd_shape},
        {"transform": PADDED},
        {"invalid_values": "quarantine"},
        {"indexes": {"by_i": "i"}},
    ],
    ids=["plain", "transform function", "declared transform", "quarantine", "declared index"],
)
def test_c_loop_writes_the_versions_the_python_loop_writes(
    settings: dict[str, Any],
    kafka_bootstrap: str,
    make_topic,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    fill_topic(kafka_bootstrap, topic)
    with caplog.at_level(logging.INFO, logger="globalstore.follow.native_source"):
        by_c = restore(kafka_bootstrap, topic, tmp_path / "c", True, history=3600, **settings)
    assert f"restoring {topic} with the C loop" in caplog.text
    by_python = restore(kafka_bootstrap, topic, tmp_path / "py", False, history=3600, **settings)

    assert by_c == by_python
    # Not vacuous (history layout 3: an entry for each value a record replaced and for each
    # tombstone, a transform's drops among them; the current values have none): the
    # committed transaction replaced the first 300 keys' records, "deleted" its value.
    versions = {e: v for e, v in by_c["index"] if e.startswith(PREFIX)}
    assert len(versions) >= 300
    deleted = [v for e, v in versions.items() if e.startswith(b"hdeleted\x00\x00")]
    assert len(deleted) == 2 and deleted[0][:1] == b"\x00"  # newest first: the tombstone
    if "transform" not in settings:  # the value the tombstone replaced, as it came
        assert deleted[1][22:] == value(10)
    tombstones = sum(v[:1] == b"\x00" for v in versions.values())
    assert tombstones > 1 if "transform" in settings else tombstones == 1
    # A value the quarantine holds apart leaves its key, and its versions, as they were:
    # none; elsewhere the key holds it (a current value: no entry) or a transform's drop.
    empty = b"empty-value" in by_c["values"] or any(
        e.startswith(b"hempty-value\x00\x00") for e in versions
    )
    assert empty == (settings.get("invalid_values") != "quarantine")


def test_follows_where_the_c_loop_stopped(kafka_bootstrap: str, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, ((f"k{i:05d}", {"i": i}) for i in range(5_000)))
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=kafka_bootstrap,
        path=tmp_path / "s",
        bulk_restore_threshold=0,
    )
    with GlobalStore.from_config(config) as store:
        produce(kafka_bootstrap, topic, [("k00001", {"i": "new"}), ("k00002", None), ("n", {})])
        assert store.wait_for(end_offsets(kafka_bootstrap, topic), timeout=60), store.status()
        assert store.get("k00001") == {"i": "new"} and store.get("k00002") is None
        assert store.get("n") == {} and store.get("k04999") == {"i": 4999}
        # The recount after a bulk restore, then exact applies: 5,000 + "n" - "k00002".
        assert store.count() == 5_000, store.status()


class _LateFirstBatch(StoreListener):
    """Holds the restore before its first batch, so the consumer's queue already holds the
    partition's records and its end-of-partition event when that batch is taken."""

    def on_restore_start(self, topic, start_offsets, end_offsets) -> None:  # type: ignore[no-untyped-def]
        time.sleep(1.0)


@pytest.mark.parametrize("native", [True, False], ids=["C loop", "Python loop"])
def test_a_batch_ending_past_its_last_record_reaches_the_end(
    native: bool, kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """The partition ends in an aborted transaction: its last offsets hold no record to
    apply, and only the end-of-partition event, in the same batch as the records, takes the
    position there. A loaded run once caught the C loop letting the records' own offset win."""
    topic = make_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}", i) for i in range(100)])
    tx = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"}
    )
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, key=b"k0", value=value(-1), headers=DECLARED)
    assert tx.flush(30) == 0
    tx.abort_transaction(30)
    end = end_offsets(kafka_bootstrap, topic)
    config = StoreConfig(
        topic=topic,
        bootstrap_servers=kafka_bootstrap,
        path=tmp_path / "s",
        bulk_restore_threshold=0,
        native_restore=native,
    )
    with GlobalStore.from_config(config, listeners=[_LateFirstBatch()]).start(30) as store:
        assert store.position() == end == {0: 102}
        assert store.get("k0") == 0
