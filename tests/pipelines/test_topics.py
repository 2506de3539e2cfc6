"""The target topic is created compacted, and an existing non-compacted one is refused."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from globalstore.errors import TopicNotCompacted
from pipelines.topics import ensure_topics

pytestmark = pytest.mark.integration


def cleanup_policy(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value


def test_missing_topics_are_created_with_source_partitions(
    kafka_bootstrap: str, kafka_admin: AdminClient, make_topic: Callable[..., str]
) -> None:
    source = make_topic(partitions=3, compact=False)
    target, dlq = f"target-{uuid.uuid4().hex[:8]}", f"dlq-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, source, target, dlq)
    topics = kafka_admin.list_topics(timeout=10).topics
    assert len(topics[target].partitions) == 3
    assert cleanup_policy(kafka_admin, target) == "compact"
    assert cleanup_policy(kafka_admin, dlq) == "delete"


def test_existing_non_compacted_target_is_refused(
    kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    source, target = make_topic(compact=False), make_topic(compact=False)
    with pytest.raises(TopicNotCompacted, match=r"cleanup\.policy=compact"):
        ensure_topics(kafka_bootstrap, source, target, f"dlq-{uuid.uuid4().hex[:8]}")
