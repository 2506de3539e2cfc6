"""Make sure the pipeline's output topics exist with the right cleanup policy."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from globalstore.codec import require_compacted
from globalstore.errors import TopicNotFound

ADMIN_TIMEOUT_S = 30.0


def ensure_topics(
    bootstrap_servers: str,
    source: str,
    target: str,
    dead_letter: str,
    kafka_options: Mapping[str, str] | None = None,
) -> None:
    """Create target (compacted) and dead-letter topics if missing; refuse a bad target.

    `kafka_options` are further client settings (security). New topics get the source
    topic's partition count so output parallelism follows input.
    """
    admin = AdminClient({**(kafka_options or {}), "bootstrap.servers": bootstrap_servers})
    existing = ensure_target(admin, source, target)
    if dead_letter not in existing:
        partitions = len(existing[source].partitions) if source in existing else 1
        _create(admin, dead_letter, partitions, {"cleanup.policy": "delete"})
    _wait_until_visible(admin, (target, dead_letter))


def ensure_target(admin: AdminClient, source: str, target: str) -> dict[str, Any]:
    """Create the compacted `target` with `source`'s partition count if missing, refuse it if
    not compacted; the topics that existed before."""
    existing: dict[str, Any] = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
    partitions = len(existing[source].partitions) if source in existing else 1
    if target in existing:
        _require_compacted(admin, target)
    else:
        _create(admin, target, partitions, {"cleanup.policy": "compact"})
    return existing


def _require_compacted(admin: AdminClient, topic: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    require_compacted(topic, configs["cleanup.policy"].value, "or choose another --target-topic")


def require_topic(
    bootstrap_servers: str, topic: str, kafka_options: Mapping[str, str], generator: str
) -> None:
    """TopicNotFound, saying how to fill it, unless `topic` exists."""
    admin = AdminClient({**kafka_options, "bootstrap.servers": bootstrap_servers})
    if topic not in admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics:
        raise TopicNotFound(
            f"raw topic {topic!r} does not exist at {bootstrap_servers}: put events on it "
            f"first (sample ones: `globalstore {generator}`)"
        )


def ensure_topic(bootstrap_servers: str, topic: str, partitions: int) -> None:
    """Create `topic` (plain delete policy: raw events age out) unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    if topic not in admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics:
        _create(admin, topic, partitions, {"cleanup.policy": "delete"})
        _wait_until_visible(admin, (topic,))


def _create(admin: AdminClient, topic: str, partitions: int, config: dict[str, str]) -> None:
    # replication_factor=-1: the cluster's default.replication.factor decides.
    new = NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=config)
    try:
        admin.create_topics([new])[topic].result(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:  # another process may have created it in between
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def _wait_until_visible(admin: AdminClient, topics: tuple[str, ...]) -> None:
    # A created topic reaches the broker's metadata a moment after create_topics returns;
    # callers (the job, a describe_configs) expect it to be there when this returns.
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while time.monotonic() < deadline:
        known = admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        if all(topic in known and not known[topic].error for topic in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {topics} did not appear within {ADMIN_TIMEOUT_S:.0f}s")
