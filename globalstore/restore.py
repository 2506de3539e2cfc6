"""Restore planning: look at the topic and the store, decide resume or rebuild, and say where
each partition starts and where "ready" is (the end offsets captured now, contract 4).

The records themselves are applied by the one poll loop in follow.py; this module only decides
what that loop must reach and tells the listener how it goes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from globalstore import migrate
from globalstore.config import StoreConfig
from globalstore.errors import BrokerUnavailable, TopicNotCompacted, TopicNotFound
from globalstore.meta import DamagedLayoutError
from globalstore.storage import Storage

log = logging.getLogger(__name__)


class RestoreListener:
    """Hooks for restore progress. Subclass and override what you need; all default to no-op.

    Called from the store's background thread: keep them quick, do not call back into the store.
    """

    def on_restore_start(
        self, topic: str, start_offsets: Mapping[int, int], end_offsets: Mapping[int, int]
    ) -> None:
        """Restore begins; end_offsets are what the store must reach to be ready."""

    def on_batch_restored(self, topic: str, positions: Mapping[int, int], records: int) -> None:
        """One batch of `records` records was written; positions are next offsets per partition."""

    def on_restore_end(self, topic: str, total_records: int, seconds: float) -> None:
        """Every partition reached its captured end offset; the store is ready."""


@dataclass(frozen=True)
class TopicInfo:
    partitions: tuple[int, ...]
    topic_id: str | None
    compacted: bool
    delete_retention_ms: int | None


@dataclass(frozen=True)
class Plan:
    """Where each partition starts, the end offsets that mean ready, and how to count keys."""

    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    exact_count: bool

    @property
    def records_to_restore(self) -> int:
        return _records_between(self.start_offsets, self.end_offsets)


def _records_between(start: dict[int, int], end: dict[int, int]) -> int:
    return sum(max(0, end[p] - start[p]) for p in end)


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
    policy = settings.get("cleanup.policy", "")
    retention = settings.get("delete.retention.ms")
    return TopicInfo(
        partitions=tuple(sorted(tmd.partitions)),
        topic_id=_topic_id(admin, topic, timeout),
        compacted="compact" in policy,
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
    if info.compacted:
        return
    if not config.allow_uncompacted:
        raise TopicNotCompacted(
            f"topic {config.topic!r} is not compacted (cleanup.policy lacks 'compact'): a store "
            "fed by it would lose keys as segments expire. Set cleanup.policy=compact, or pass "
            "allow_uncompacted=True to accept that."
        )
    log.warning(
        "topic %s is not compacted; continuing because allow_uncompacted=True", config.topic
    )


def plan(
    storage: Storage, info: TopicInfo, marks: Mapping[int, tuple[int, int]], config: StoreConfig
) -> Plan:
    """Resume from the stored offsets, or wipe the store and start over (WARNING) if resuming
    could leave it different from the topic."""
    reason = _rebuild_reason(storage, info, marks, config)
    if reason is not None:
        log.warning(
            "rebuilding store %s from the beginning of %s: %s", storage.path, config.topic, reason
        )
        storage.wipe()
    meta = storage.read_meta()
    if meta.layout is None:  # a new (or just wiped) store
        storage.initialise(config.topic, info.topic_id)
        meta = storage.read_meta()
    storage.load(meta)
    positions, count = storage.snapshot_state()
    start = {p: positions.get(p, marks[p][0]) for p in info.partitions}
    end = {p: marks[p][1] for p in info.partitions}
    exact = count is not None and _records_between(start, end) <= config.bulk_restore_threshold
    return Plan(start, end, exact)


def _rebuild_reason(
    storage: Storage, info: TopicInfo, marks: Mapping[int, tuple[int, int]], config: StoreConfig
) -> str | None:
    try:
        meta = storage.read_meta()
    except DamagedLayoutError as exc:
        return f"store metadata is damaged ({exc})"
    if meta.layout is None:
        return None if storage.is_empty() else "store has data but no layout version"
    layout_problem = migrate.check_layout(meta.layout)
    if layout_problem is not None:
        return layout_problem
    if meta.topic is not None and meta.topic != config.topic:
        return f"store holds topic {meta.topic!r}, not {config.topic!r}"
    if meta.topic_id and info.topic_id and meta.topic_id != info.topic_id:
        return f"topic was recreated (id {meta.topic_id} is now {info.topic_id})"
    for p, offset in meta.offsets.items():
        if p not in marks:
            return f"stored partition {p} no longer exists in the topic"
        low, high = marks[p]
        if not low <= offset <= high:
            return (
                f"stored offset {offset} of partition {p} is outside the topic's range "
                f"[{low}, {high}] (topic recreated or records deleted)"
            )
    if meta.offsets and meta.applied_at_ms is not None and info.delete_retention_ms is not None:
        offline_ms = int(time.time() * 1000) - meta.applied_at_ms
        if offline_ms > info.delete_retention_ms:
            return (
                f"store was offline {offline_ms / 1000:.1f}s, longer than the topic's "
                f"delete.retention.ms ({info.delete_retention_ms} ms): tombstones may be gone"
            )
    return None


def _unreachable(config: StoreConfig, exc: BaseException) -> str:
    return f"no Kafka broker answered at {config.bootstrap_servers}: {exc}"
