"""Helpers shared by the store integration tests: producing records the way the pipeline does,
folding a topic into the content a store must equal, and whether a process runs."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from globalstore import StoreListener
from globalstore.codec import VALUE_FORMAT_VERSION, encode_key, encode_value, format_headers

Record = tuple[str, Any]  # (key, JSON value or None for a tombstone)


def producer(bootstrap: str, **extra: Any) -> Producer:
    conf = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 1_000_000,
        "compression.type": "lz4",
        # Tests compare against a model built in produce order: a retried batch must never
        # land after a later one in the same partition.
        "enable.idempotence": True,
    }
    conf.update(extra)
    return Producer(conf)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    partition: int | None = None,
    value_format: int = VALUE_FORMAT_VERSION,
    **client: Any,
) -> dict[int, int]:
    """Produce (key, value) records declaring `value_format` and wait until all are
    acknowledged; fail on any delivery error. `client` adds settings (security, ...).
    Returns {partition: the offset after the last record written there}."""
    p = producer(bootstrap, **client)
    headers = format_headers(value_format)
    failed: list[str] = []
    written: dict[int, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")
        else:
            written[msg.partition()] = max(written.get(msg.partition(), 0), msg.offset() + 1)

    for key, value in records:
        kwargs: dict[str, Any] = {
            "key": encode_key(key),
            "value": encode_value(value),
            "headers": headers,
            "on_delivery": on_delivery,
        }
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0, "records left unacknowledged"
    assert not failed, f"{len(failed)} records not delivered, e.g. {failed[:3]}"
    return written


def produce_raw(bootstrap: str, topic: str, key: bytes, value: bytes | None) -> None:
    p = producer(bootstrap)
    p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0


def set_topic_config(admin: AdminClient, topic: str, name: str, value: str) -> None:
    """Set one topic config and return once the broker describes the new value (a start
    right after reads it through DescribeConfigs, which may lag the change)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(30)
    deadline = time.monotonic() + 30
    while True:
        described = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([described])[described].result(30)
        if configs[name].value == value:
            return
        assert time.monotonic() < deadline, f"{topic}: {name} still {configs[name].value}"
        time.sleep(0.05)


class HeldRestore(StoreListener):
    """Holds each restored batch until released (or `wait` seconds), so a test acts while the
    restore is surely still running, however fast the machine."""

    def __init__(self, wait: float = 30.0) -> None:
        self.release = threading.Event()
        self.wait = wait

    def on_batch_restored(self, topic, positions, records) -> None:  # type: ignore[no-untyped-def]
        self.release.wait(self.wait)


def topic_content(bootstrap: str, topic: str) -> dict[str, Any]:
    """The topic folded by a plain read_committed consumer, every partition from its
    beginning to its end: latest value per key (the reference a store must equal)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    folded: dict[str, Any] = {}
    at_end: set[int] = set()
    while len(at_end) < len(partitions):
        for m in consumer.consume(10_000, 1.0):
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            key, value = m.key().decode(), m.value()
            if value is None:
                folded.pop(key, None)
            else:
                folded[key] = orjson.loads(value)
    consumer.close()
    return folded


def process_running(pid: int) -> bool:
    """Alive and not a zombie waiting for its reaper."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def create_when_deleted(admin: AdminClient, topic: str, partitions: int = 1) -> None:
    """Create `topic` again once its deletion (asynchronous) is complete. Only "already
    exists" means "not yet": any other error fails at once."""
    deadline = time.monotonic() + 60
    config = {"cleanup.policy": "compact"}
    while True:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(
                timeout=30
            )
            return
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            assert time.monotonic() < deadline, f"{topic} still not deleted after 60 s: {error}"
            time.sleep(0.5)
