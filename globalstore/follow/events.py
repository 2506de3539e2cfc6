"""What the consumer reports besides records, and what each report means for the store:
partition ends, errors (some fatal, some retried by librdkafka), and partitions that appeared."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from globalstore.config import StoreConfig
from globalstore.errors import FatalError, OffsetsOutOfRange
from globalstore.follow import topic
from globalstore.follow.health import Health
from globalstore.kafka.clients import StoreConsumer

__all__ = ["handle", "log_skipped", "new_partitions"]

log = logging.getLogger(__name__)

_SKIPPED_LOGGED_PER_BATCH = 3  # the rest are counted in the status, not logged one by one


def handle(event: Any, config: StoreConfig, health: Health, restoring: bool) -> None:
    """Note a consumer event in `health`, or raise the error it means for the store thread."""
    err = event.error()
    if err.code() == KafkaError._PARTITION_EOF:
        health.raise_high(event.partition(), event.offset())
        return
    if err.code() == KafkaError._AUTO_OFFSET_RESET:
        # auto.offset.reset=error: the position is outside the partition's offsets. Going
        # on from anywhere else could keep keys the topic deleted, and rebuilding in place
        # would serve partial data: stop following and keep serving the last state; the
        # store rebuilds beside it (heal.py) or, with out_of_range="stop", the next
        # start() rebuilds (the plan sees the offsets out of range).
        log.error("offsets out of range on %s: %s", config.topic, err)
        raise OffsetsOutOfRange(
            f"partition {event.partition()} of {config.topic}: {err}. The topic no longer "
            "holds the store's position (records deleted or topic recreated); the store "
            "serves its last state while it rebuilds beside it (out_of_range='rebuild') or "
            "until restarted (out_of_range='stop')"
        )
    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        # librdkafka looks up the coordinator of the (random) group.id a consumer must
        # have; the store never joins or commits, so a principal without group ACLs is fine.
        log.debug("consumer on %s: %s (the store uses no group)", config.topic, err)
        return
    if topic.denied(err) and restoring:
        # No READ ACL: librdkafka would back off and retry for ever, and start() time
        # out as if the broker were down. Once running, a revoked grant is logged below
        # as an error while librdkafka keeps retrying; the store serves its last state.
        raise topic.refused(config, "Read", err)
    health.last_error = str(err)
    if err.fatal() or err.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ):
        log.error("consumer error on %s: %s", config.topic, err)
        if err.fatal():
            raise FatalError(f"fatal Kafka error on {config.topic}: {err}")
        return
    log.warning("consumer error on %s: %s", config.topic, err)


def new_partitions(consumer: StoreConsumer, name: str, known: set[int]) -> list[int]:
    """Partitions of topic `name` the metadata lists beyond `known` (none while the broker
    is away: health already says so)."""
    try:
        md = consumer.list_topics(name, timeout=1.0)
    except KafkaException:
        return []
    tmd = md.topics.get(name)
    if tmd is None or tmd.error is not None:
        return []
    return sorted(set(tmd.partitions) - known)


def log_skipped(name: str, skipped: list[tuple[int, int, bytes]]) -> None:
    """Say which records of a batch were skipped for a key that is not UTF-8 (a few)."""
    for partition, offset, key in skipped[:_SKIPPED_LOGGED_PER_BATCH]:
        log.warning(
            "skipped the record at %s partition %d offset %d: its key %r is not UTF-8 "
            "(the topic contract's keys are UTF-8 entity ids)",
            name,
            partition,
            offset,
            key,
        )
