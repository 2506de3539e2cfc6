"""Read what a job wrote: a whole topic with a plain consumer, or through a GlobalStore."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from globalstore import GlobalStore
from globalstore.follow.topic import end_offsets


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    partition: int
    offset: int


def read_topic(
    bootstrap: str,
    topic: str,
    after: dict[int, int] | None = None,
    timeout_s: float = 30.0,
    kafka_config: Mapping[str, str] | None = None,
) -> list[Record]:
    """Every record from `after` (next offset per partition; default: start) to the end.
    `kafka_config`: client settings (security)."""
    settings = dict(kafka_config or {})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False}
        | settings
    )
    try:
        ends = end_offsets(bootstrap, topic, **settings)
        starts = after or {}
        assigned = [
            TopicPartition(topic, p, starts.get(p, 0)) for p in ends if ends[p] > starts.get(p, 0)
        ]
        consumer.assign(assigned)
        records: list[Record] = []
        remaining = {tp.partition for tp in assigned}
        while remaining:
            message = consumer.poll(timeout_s)
            assert message is not None, f"timed out reading {topic}"
            assert message.error() is None, message.error()
            records.append(
                Record(
                    message.key(),
                    message.value(),
                    dict(message.headers() or []),
                    message.partition(),
                    message.offset(),
                )
            )
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.discard(message.partition())
        return records
    finally:
        consumer.close()


def compacted(records: list[Record]) -> dict[str, bytes]:
    """Latest value per key, tombstones deleting: what compaction converges to."""
    content: dict[str, bytes] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        key = (record.key or b"").decode()
        if record.value is None:
            content.pop(key, None)
        else:
            content[key] = record.value
    return content


def compacted_json(
    bootstrap: str, topic: str, kafka_config: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The compacted content of a topic of JSON values, decoded: what the reference models'
    `active()` / `figures()` return when the job wrote what they expect."""
    records = read_topic(bootstrap, topic, kafka_config=kafka_config)
    return {key: orjson.loads(value) for key, value in compacted(records).items()}


def restored_store(
    bootstrap: str, topic: str, tmp_path: Path, kafka_config: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What a GlobalStore restored from `topic` holds."""
    store = GlobalStore(
        topic=topic,
        bootstrap_servers=bootstrap,
        path=str(tmp_path / "store"),
        kafka_config=dict(kafka_config or {}),
    )
    try:
        store.start(60)
        return dict(store.items())
    finally:
        store.close()
