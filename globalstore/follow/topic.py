"""What the store asks the broker about its topic: partitions, id, settings, offsets.

Every call here is a short broker request; an unreachable broker is BrokerUnavailable, which
the store thread retries until start() gives up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    OffsetSpec,
)

from globalstore.codec import is_compacted, require_compacted
from globalstore.config import StoreConfig
from globalstore.errors import (
    AuthorizationError,
    BrokerUnavailable,
    TopicNotFound,
)
from globalstore.kafka.clients import LIBRDKAFKA_LOG, StoreConsumer

__all__ = [
    "Marks",
    "TopicInfo",
    "check_compaction",
    "denied",
    "describe_topic",
    "end_offsets",
    "records_between",
    "refused",
    "watermarks",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicInfo:
    """What the store needs to know of its topic: partitions, id and the two configs it checks."""

    partitions: tuple[int, ...]
    topic_id: str | None
    cleanup_policy: str | None
    delete_retention_ms: int | None  # None: not set, or not checked
    configs_checked: bool = True  # False: check_topic_config=False, the two above unknown

    @property
    def compacted(self) -> bool:
        """Whether the topic's cleanup.policy keeps the latest value of every key."""
        return is_compacted(self.cleanup_policy)


def records_between(start: Mapping[int, int], end: Mapping[int, int]) -> int:
    """How many offsets lie between two positions, summed over the partitions of `end`."""
    return sum(max(0, e - start.get(p, 0)) for p, e in end.items())


def end_offsets(
    bootstrap_servers: str, topic: str, timeout: float = 10.0, **kafka_config: Any
) -> dict[int, int]:
    """{partition: end offset} of `topic` now: what a producer or a test waits for with
    GlobalStore.wait_for(). kafka_config adds client settings (security, ...)."""
    # librdkafka wants a group id for any consumer; nothing is subscribed or committed.
    conf = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "globalstore-end-offsets",
        "logger": LIBRDKAFKA_LOG,
    }
    consumer = Consumer({**conf, **kafka_config})
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout, cached=False)[1]
            for p in sorted(partitions)
        }
    finally:
        consumer.close()


def describe_topic(
    consumer: StoreConsumer,
    admin: AdminClient,
    config: StoreConfig,
    timeout: float,
    answered: Callable[[], None] = lambda: None,
) -> TopicInfo:
    """Partitions and relevant settings of the topic; raises BrokerUnavailable if unreachable,
    AuthorizationError if the broker denies the store Describe or DescribeConfigs on it.
    `answered` is called once a broker has answered the metadata request."""
    topic = config.topic
    try:
        md = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(_unreachable(config, exc)) from exc
    answered()
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None:
        code = tmd.error.code() if tmd is not None and tmd.error is not None else None
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, None):
            raise TopicNotFound(f"topic {topic!r} does not exist at {config.bootstrap_servers}")
        if denied(tmd.error):
            raise refused(config, "Describe", tmd.error)
        raise BrokerUnavailable(f"metadata for {topic!r} failed: {tmd.error}")
    partitions = tuple(sorted(tmd.partitions))
    if not config.check_topic_config:
        return TopicInfo(partitions, _topic_id(admin, config, timeout), None, None, False)
    settings = _topic_configs(admin, topic, config, timeout)
    retention = settings.get("delete.retention.ms")
    return TopicInfo(
        partitions=partitions,
        topic_id=_topic_id(admin, config, timeout),
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
        if denied(exc):
            raise refused(config, "DescribeConfigs", exc) from exc
        raise BrokerUnavailable(_unreachable(config, exc, "the config")) from exc
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def denied(error: object) -> bool:
    """Whether a client error (a KafkaError, or a KafkaException carrying one) is the broker
    refusing an operation on the topic: a missing ACL, which waiting will not cure."""
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    return isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def refused(config: StoreConfig, operation: str, error: object) -> AuthorizationError:
    """The AuthorizationError for a denied `operation` on the store's topic, with the way on:
    the grant to ask for, or (DescribeConfigs only) how to start without it."""
    grant = (
        f"kafka-acls.sh --add --allow-principal User:<name> --operation {operation} "
        f"--topic {config.topic}"
    )
    if operation == "DescribeConfigs":
        remedy = (
            "The store reads the topic's cleanup.policy and delete.retention.ms to check that "
            "it is compacted and when a store offline too long must be rebuilt. Grant "
            f"DescribeConfigs on the topic ({grant}), or pass check_topic_config=False to "
            "start without these checks."
        )
    else:
        remedy = (
            f"The store needs Read and Describe on the topic: grant {operation} ({grant}), "
            "or connect as a principal that has it."
        )
    username = config.kafka_config.get("sasl.username")
    return AuthorizationError(config.topic, operation, username, str(error), remedy)


def _topic_id(admin: AdminClient, config: StoreConfig, timeout: float) -> str | None:
    """The topic's UUID, which tells a recreated topic from the old one (None if unknown).
    No answer at all is BrokerUnavailable: an old broker refuses at once."""
    try:
        futures = admin.describe_topics(TopicCollection([config.topic]))
        return str(futures[config.topic].result(timeout=timeout).topic_id)
    except TimeoutError as exc:  # a future's timeout is the builtin one
        raise BrokerUnavailable(_unreachable(config, exc, "the id")) from exc
    except Exception:  # an old broker or client: fall back to the offset-range checks
        return None


@dataclass(frozen=True)
class Marks:
    """A partition's offsets now: the first held, the high watermark, and the last stable
    offset, which is as far as a read_committed consumer can read (below an open
    transaction) and so the end a restore can reach."""

    low: int
    high: int
    stable: int


def watermarks(
    consumer: StoreConsumer,
    admin: AdminClient,
    config: StoreConfig,
    partitions: tuple[int, ...],
    timeout: float,
) -> dict[int, Marks]:
    """Marks per partition, asked from the broker now. An unanswered request names the
    partition whose offsets it asked (its leader is the broker that did not answer)."""
    tps = [TopicPartition(config.topic, p) for p in partitions]
    asking = "the offsets"
    try:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout,
        )
        stable = {}
        for tp, future in futures.items():
            asking = f"the last stable offset of partition {tp.partition} (from its leader)"
            stable[tp.partition] = future.result(timeout=timeout).offset
        out = {}
        for tp in tps:
            asking = f"the offsets of partition {tp.partition} (from its leader)"
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
            out[tp.partition] = Marks(low, high, min(stable[tp.partition], high))
    except (KafkaException, TimeoutError) as exc:
        if denied(exc):
            raise refused(config, "Describe", exc) from exc
        raise BrokerUnavailable(_unreachable(config, exc, asking)) from exc
    return out


def check_compaction(info: TopicInfo, config: StoreConfig) -> None:
    """TopicNotCompacted, unless the topic compacts or the caller accepted that it does not."""
    if not info.configs_checked:
        log.warning(
            "topic %s: cleanup.policy and delete.retention.ms not checked "
            "(check_topic_config=False): whether the topic is compacted is not verified, and "
            "a store offline longer than delete.retention.ms is resumed, not rebuilt",
            config.topic,
        )
    elif not config.allow_uncompacted:
        require_compacted(config.topic, info.cleanup_policy, "or pass allow_uncompacted=True")
    elif not info.compacted:
        log.warning(
            "topic %s is not compacted; continuing because allow_uncompacted=True", config.topic
        )


def _unreachable(config: StoreConfig, exc: BaseException, asking: str | None = None) -> str:
    said = str(exc) or type(exc).__name__  # a future's TimeoutError says nothing
    where = config.bootstrap_servers
    if asking is None:
        return f"no Kafka broker answered at {where}: {said}"
    return f"waiting for {asking} of {config.topic}: no answer from {where}: {said}"
