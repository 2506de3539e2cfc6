"""Partitions whose end is not a data record: transaction markers and aborted records.

A read_committed consumer never receives those offsets, so a store that only counts the
records it applied would stay short of the end forever: lag() above 0, wait_for() on the
high watermark never True. The end the consumer reached (its partition EOF) is a position.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer

from globalstore import GlobalStore
from globalstore.codec import encode_key, encode_value, format_headers
from globalstore.follow.topic import end_offsets

WAIT = 20.0


def _transaction(bootstrap: str, topic: str, records: dict[str, object], commit: bool) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    p.begin_transaction()
    for key, value in records.items():
        p.produce(topic, key=encode_key(key), value=encode_value(value), headers=format_headers())
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def test_a_partition_ending_in_a_commit_marker_is_reached(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    _transaction(kafka_bootstrap, topic, {"a": 1, "b": 2}, commit=True)
    high = end_offsets(kafka_bootstrap, topic)
    assert high == {0: 3}  # two records and the commit marker
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.wait_for(high, timeout=WAIT), store.status()
        assert store.lag() == {0: 0}
        assert dict(store.items()) == {"a": 1, "b": 2}


def test_aborted_records_at_the_end_are_skipped_and_reached(
    kafka_bootstrap: str, make_topic, tmp_path: Path
) -> None:
    topic = make_topic(partitions=2)
    _transaction(kafka_bootstrap, topic, {f"kept-{i}": i for i in range(10)}, commit=True)
    _transaction(kafka_bootstrap, topic, {f"aborted-{i}": i for i in range(10)}, commit=False)
    high = end_offsets(kafka_bootstrap, topic)
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.wait_for(high, timeout=WAIT), store.status()
        assert store.lag() == {0: 0, 1: 0}
        assert sorted(store.keys()) == sorted(f"kept-{i}" for i in range(10))
        # While following, too: a new aborted transaction then a committed one.
        _transaction(kafka_bootstrap, topic, {"late-aborted": 1}, commit=False)
        _transaction(kafka_bootstrap, topic, {"late-kept": 1}, commit=True)
        _transaction(kafka_bootstrap, topic, {"last-aborted": 1}, commit=False)
        high = end_offsets(kafka_bootstrap, topic)
        assert store.wait_for(high, timeout=WAIT), (high, store.status())
        assert store.lag() == {0: 0, 1: 0}
        assert store.get("late-kept") == 1
        assert store.get("late-aborted") is None and store.get("last-aborted") is None
    # The reached end is stored with the data: a restart resumes there, nothing left to read.
    with GlobalStore(topic, kafka_bootstrap, tmp_path / "s") as store:
        assert store.position() == high
