"""A topic the log cleaner has really compacted: cleaned segments, offset gaps, tombstones
removed. The session broker cleans too slowly to show it, so this module runs a broker of
its own whose cleaner wakes every 200 ms."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from globalstore import GlobalStore, end_offsets
from globalstore.localkafka import ANY_PORT, LocalKafka
from tests.integration.store_support import produce, set_topic_config

DEADLINE = 90.0
FAST_CLEANING = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
}


@pytest.fixture(scope="module")
def cleaning_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = LocalKafka(
        port=ANY_PORT,
        data_dir=tmp_path_factory.mktemp("cleaning-broker"),
        heap="512m",
        extra_config={"log.cleaner.backoff.ms": "200"},
    )
    broker.start(timeout=180)
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _offsets_held(bootstrap: str, topic: str) -> list[int]:
    """The offsets of the records the partition still holds, read with a plain consumer."""
    end = end_offsets(bootstrap, topic)[0]
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "probe", "enable.partition.eof": True}
    )
    c.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    try:
        while not seen or seen[-1] < end - 1:
            msg = c.poll(10)
            if msg is None or msg.error() is not None:
                break
            seen.append(msg.offset())
    finally:
        c.close()
    return seen


def _write_in_segments(bootstrap: str, topic: str) -> dict[str, object]:
    """Ten versions of twenty keys, then tombstones for half of them, each round in a segment
    of its own; returns what compaction must converge to."""
    for version in range(10):
        produce(bootstrap, topic, [(f"k{i:02d}", {"v": version}) for i in range(20)])
        time.sleep(0.15)  # past segment.ms: the next round rolls a new segment
    produce(bootstrap, topic, [(f"k{i:02d}", None) for i in range(10)])
    time.sleep(0.15)
    produce(bootstrap, topic, [("last", {"v": 0})])  # rolls the tombstones' segment too
    return {**{f"k{i:02d}": {"v": 9} for i in range(10, 20)}, "last": {"v": 0}}


def _wait_until_cleaned(bootstrap: str, topic: str) -> int:
    """Nudge the cleaner (a tombstone goes only in a later pass over a dirty log) until every
    overwritten value and every tombstone below offset 210 is gone; returns the nudges."""
    gone = set(range(190)) | set(range(200, 210))  # old versions, then the tombstones
    deadline = time.monotonic() + DEADLINE
    nudges = 0
    held = set(_offsets_held(bootstrap, topic))
    while held & gone and time.monotonic() < deadline:
        nudges += 1
        produce(bootstrap, topic, [("nudge", {"v": nudges})])
        time.sleep(0.3)
        held = set(_offsets_held(bootstrap, topic))
    assert not held & gone, f"the cleaner left {sorted(held & gone)}"
    return nudges


def test_a_compacted_topic_restores_and_resumes_across_its_gaps(
    cleaning_broker: str, tmp_path: Path
) -> None:
    topic = "compacted"
    admin = AdminClient({"bootstrap.servers": cleaning_broker})
    admin.create_topics([NewTopic(topic, 1, 1, config=FAST_CLEANING)])[topic].result(30)
    expected = _write_in_segments(cleaning_broker, topic)
    assert end_offsets(cleaning_broker, topic) == {0: 211}
    # One store restores before the cleaner has been through.
    with GlobalStore(topic, cleaning_broker, tmp_path / "early") as early:
        assert dict(early.items()) == expected

    nudges = _wait_until_cleaned(cleaning_broker, topic)
    if nudges:
        expected["nudge"] = {"v": nudges}
    end = end_offsets(cleaning_broker, topic)
    with GlobalStore(topic, cleaning_broker, tmp_path / "late") as late:
        assert dict(late.items()) == expected and late.count() == len(expected)
        assert late.position() == end and late.lag() == {0: 0}
    produce(cleaning_broker, topic, [("k10", None), ("after", {"v": 1})])
    expected = {k: v for k, v in expected.items() if k != "k10"} | {"after": {"v": 1}}
    # With delete.retention.ms=0 the early store, away for seconds, must rebuild (it may
    # have missed tombstones); given a long retention it resumes across the cleaned range.
    set_topic_config(admin, topic, "delete.retention.ms", "600000")
    with GlobalStore(topic, cleaning_broker, tmp_path / "early") as early:
        assert early.status().rebuild_reason is None, early.status()
        assert dict(early.items()) == expected
        assert early.position() == end_offsets(cleaning_broker, topic)
