"""Asking the running nodes: does this one answer yet, and who leads that partition."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from confluent_kafka.admin import AdminClient

from globalstore.localkafka.errors import LocalKafkaError

__all__ = ["admin_client", "answers", "partition_leader"]


def admin_client(bootstrap: str, client: Mapping[str, str]) -> AdminClient:
    """An admin client on `bootstrap` with `client`'s settings, quiet: while a node starts,
    refused connections are expected and not worth a line on stderr."""
    settings: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "log_level": "0",
        **client,
    }
    return AdminClient(settings)


def answers(admin: AdminClient, node_id: int | None) -> bool:
    """Whether a metadata request through `admin` succeeds and lists node `node_id` (any
    node when None) among the brokers."""
    with contextlib.suppress(Exception):
        brokers = admin.list_topics(timeout=1.0).brokers
        return bool(brokers) if node_id is None else node_id in brokers
    return False


def partition_leader(admin: AdminClient, topic: str, partition: int) -> int:
    """The node id of the leader of `partition` of `topic` (-1 while it has none)."""
    found = admin.list_topics(topic, timeout=30).topics.get(topic)
    if found is None or found.error is not None or partition not in found.partitions:
        error = found.error if found is not None else "not in the metadata"
        raise LocalKafkaError(f"no partition {partition} of topic {topic}: {error}")
    return int(found.partitions[partition].leader)
