"""A cold restore equals the topic however its producer wrote it: small or large batches,
lz4 or zstd compression, transactions (committed and aborted). Each topic holds more records
than bulk_restore_threshold, so the restore takes the bulk path (no key lookups, no
write-ahead log) that cold restores of real topics take, in the C loop and in the Python one."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from globalstore import GlobalStore, StoreConfig
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.follow.topic import end_offsets
from tests.integration.store_support import Record, produce, producer, topic_content

PARTITIONS = 3
KEYS = 8_000
RECORDS = 60_000  # above the default bulk_restore_threshold (50k)

# Producer settings per case: how many records go into one batch, and how batches are packed.
WRITERS = {
    "small batches": {"linger.ms": 0, "batch.size": 2048, "compression.type": "none"},
    "large batches lz4": {"linger.ms": 100, "batch.size": 1 << 20, "compression.type": "lz4"},
    "large batches zstd": {"linger.ms": 100, "batch.size": 1 << 20, "compression.type": "zstd"},
}


def records(seed: int) -> list[Record]:
    """Overwrites and tombstones over KEYS keys, ~200-byte values like the pipeline's."""
    rng = random.Random(seed)
    out: list[Record] = []
    for i in range(RECORDS):
        key = f"entity-{rng.randrange(KEYS):05d}"
        out.append((key, None if rng.random() < 0.05 else {"i": i, "pad": "x" * 180}))
    return out


def assert_restore_equals_topic(bootstrap: str, topic: str, path: Path, native: bool) -> None:
    expected = topic_content(bootstrap, topic)
    assert expected, "the topic folded to nothing: the case tests nothing"
    config = StoreConfig(topic=topic, bootstrap_servers=bootstrap, path=path, native_restore=native)
    with GlobalStore.from_config(config) as store:
        assert store.position() == end_offsets(bootstrap, topic)
        got = dict(store.items())
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        assert not missing and not extra, (
            f"missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"
        )
        wrong = [k for k in expected if got[k] != expected[k]]
        assert not wrong, f"{len(wrong)} values differ, e.g. {wrong[:3]}"
        assert store.count() == len(expected)


LOOPS = pytest.mark.parametrize("native", [True, False], ids=["C loop", "Python loop"])


@LOOPS
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_cold_restore_equals_the_topic(
    writer: str, native: bool, kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    p = producer(kafka_bootstrap, **WRITERS[writer])
    headers = format_headers()
    for key, value in records(seed=len(writer)):
        while True:
            try:
                p.produce(topic, key=encode_key(key), value=encode_value(value), headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0, "records left unacknowledged"
    assert_restore_equals_topic(kafka_bootstrap, topic, tmp_path / "s", native)


@LOOPS
def test_cold_restore_of_transactional_batches(
    native: bool, kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    """Committed transactions count, aborted ones do not, and the markers between them are
    offsets the restore must step over to reach the end."""
    topic = make_topic(partitions=PARTITIONS)
    tx = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"restore-{uuid.uuid4().hex}",
            "linger.ms": 20,
            "compression.type": "lz4",
        }
    )
    tx.init_transactions(30)
    headers = format_headers()
    chunk = 5_000
    batch = records(seed=3)
    for n, start in enumerate(range(0, len(batch), chunk)):
        tx.begin_transaction()
        for key, value in batch[start : start + chunk]:
            while True:
                try:
                    tx.produce(
                        topic, key=encode_key(key), value=encode_value(value), headers=headers
                    )
                    break
                except BufferError:
                    tx.poll(0.05)
        # Aborted records on disk before the marker (an abort with records still in flight
        # fails on the broker): every fourth transaction, its records must not show.
        assert tx.flush(30) == 0
        if n % 4 == 3:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    # Aborted overwrites of keys the committed data holds, last in the topic.
    tx.begin_transaction()
    for key, _ in batch[:500]:
        tx.produce(
            topic, key=encode_key(key), value=encode_value({"aborted": True}), headers=headers
        )
    assert tx.flush(30) == 0
    tx.abort_transaction(30)
    produce(kafka_bootstrap, topic, [("plain", {"after": "transactions"})])
    assert_restore_equals_topic(kafka_bootstrap, topic, tmp_path / "s", native)
