"""What the store asks the broker about its topic: partitions, id, settings, offsets.

Every call here is a short broker request; an unreachable broker is BrokerUnavailable, which
the store thread retries until start() gives up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from globalstore.codec import is_compacted, require_compacted
from globalstore.config import StoreConfig
from globalstore.errors import BrokerUnavailable, TopicNotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicInfo:
    partitions: tuple[int, ...]
    topic_id: str | None
    cleanup_policy: str | None
    delete_retention_ms: int | None

    @property
    def compacted(self) -> bool:
        return is_compacted(self.cleanup_policy)


def records_between(start: Mapping[int, int], end: Mapping[int, int]) -> int:
    """How many offsets lie between two positions, summed over the partitions of `end`."""
    return sum(max(0, e - start.get(p, 0)) for p, e in end.items())


def describe_topic(
    consumer: Consumer, admin: AdminClient, config: StoreConfig, timeout: float
) -> TopicInfo:
    """Partitions and relevant settings of the topic; raises BrokerUnavailable if unreachable."""
    topic = config.topic
    try:
        md = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(_unreachable(config, exc)) from exc
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        code = tmd.error.code() if tmd is not None and tmd.error is not None else None
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, None):
            raise TopicNotFound(f"topic {topic!r} does not exist at {config.bootstrap_servers}")
        raise BrokerUnavailable(f"metadata for {topic!r} failed: {tmd.error}")
    settings = _topic_configs(admin, topic, config, timeout)
    retention = settings.get("delete.retention.ms")
    return TopicInfo(
        partitions=tuple(sorted(tmd.partitions)),
        topic_id=_topic_id(admin, topic, timeout),
        cleanup_policy=settings.get("cleanup.policy"),
        delete_retention_ms=int(retention) if retention else None,
    )


def _topic_configs(
    admin: AdminClient, topic: str, config: StoreConfig, timeout: float
) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=timeout)
    except (KafkaException, TimeoutError) as exc:  # a future's timeout is the builtin one
        raise BrokerUnavailable(_unreachable(config, exc)) from exc
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def _topic_id(admin: AdminClient, topic: str, timeout: float) -> str | None:
    """The topic's UUID, which tells a recreated topic from the old one (None if unknown)."""
    try:
        futures = admin.describe_topics(TopicCollection([topic]))
        return str(futures[topic].result(timeout=timeout).topic_id)
    except Exception:  # an old broker or client: fall back to the offset-range checks
        return None


def watermarks(
    consumer: Consumer,
    config: StoreConfig,
    partitions: tuple[int, ...],
    timeout: float,
) -> dict[int, tuple[int, int]]:
    """(low, high) per partition, asked from the broker now."""
    out = {}
    for p in partitions:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(config.topic, p), timeout=timeout, cached=False
            )
        except KafkaException as exc:
            raise BrokerUnavailable(_unreachable(config, exc)) from exc
        out[p] = (low, high)
    return out


def check_compaction(info: TopicInfo, config: StoreConfig) -> None:
    """TopicNotCompacted, unless the topic compacts or the caller accepted that it does not."""
    if not config.allow_uncompacted:
        require_compacted(config.topic, info.cleanup_policy, "or pass allow_uncompacted=True")
    elif not info.compacted:
        log.warning(
            "topic %s is not compacted; continuing because allow_uncompacted=True", config.topic
        )


def _unreachable(config: StoreConfig, exc: BaseException) -> str:
    return f"no Kafka broker answered at {config.bootstrap_servers}: {exc}"
