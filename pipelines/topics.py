"""Make sure the pipeline's topics exist with the right cleanup policy."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from globalstore.codec import require_compacted
from globalstore.errors import BrokerUnavailable, FatalError, TopicNotFound
from globalstore.kafka.clients import Refusals, create_client
from pipelines.clients import client_config

ADMIN_TIMEOUT_S = 30.0
# How long the first metadata request may wait before the broker's refusal of the
# credentials is looked at (a wrong password then fails in about this long, not in
# ADMIN_TIMEOUT_S); each next one waits twice as long, so a slow broker still answers.
_FIRST_METADATA_WAIT_S = 1.0


class AdminFailed(FatalError):  # noqa: N818 - reads as what happened
    """The broker refused to create or describe a topic; its words, one line."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code  # librdkafka's KafkaError code


class Admin:
    """An AdminClient with the user's client settings that fails in one line: an
    AuthenticationError as soon as the broker refuses the credentials, BrokerUnavailable
    when none answers."""

    def __init__(self, bootstrap_servers: str, kafka_config: Mapping[str, str] | None = None):
        self.bootstrap_servers = bootstrap_servers
        self._refusals = Refusals(bootstrap_servers, kafka_config or {})
        self.client: AdminClient = create_client(
            AdminClient, client_config(self._refusals), "admin client"
        )

    def topics(self) -> dict[str, Any]:
        """The cluster's topics (name -> metadata)."""
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        wait = _FIRST_METADATA_WAIT_S
        while True:
            try:
                return dict(self.client.list_topics(timeout=wait).topics)
            except KafkaException as exc:
                self._no_answer(exc.args[0], past_deadline=time.monotonic() > deadline)
            wait = max(min(2 * wait, deadline - time.monotonic()), _FIRST_METADATA_WAIT_S)

    def _no_answer(self, error: KafkaError, past_deadline: bool) -> None:
        """Why no broker answered, if it is known: AuthenticationError when one refused the
        credentials, BrokerUnavailable once the time is up."""
        self._refusals(error)
        self.client.poll(0)  # serves the error callback
        self._refusals.check()
        if past_deadline:
            raise BrokerUnavailable(
                f"no Kafka broker answered at {self.bootstrap_servers} within "
                f"{ADMIN_TIMEOUT_S:.0f} s: {error.str()}"
            )

    def cluster_id(self) -> str:
        """The Kafka cluster's id, which tells one cluster from another whatever its address."""
        described = self.client.describe_cluster(request_timeout=ADMIN_TIMEOUT_S)
        return str(self.result(described, "describing the cluster").cluster_id)

    def topic_id(self, topic: str) -> str | None:
        """The topic's id, which tells a recreated topic from the old one; None: no such topic."""
        futures = self.client.describe_topics(TopicCollection([topic]))
        try:
            described = self.result(futures[topic], f"describing topic {topic!r}")
        except AdminFailed as exc:
            if exc.code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise
        return str(described.topic_id)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """{partition: the offset the next record will get} of `topic` now."""
        partitions = self.topics()[topic].partitions
        asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}  # type: ignore[no-untyped-call]
        futures = self.client.list_offsets(asked, request_timeout=ADMIN_TIMEOUT_S)
        action = f"listing the end offsets of {topic!r}"
        return {tp.partition: self.result(f, action).offset for tp, f in futures.items()}

    def result(self, future: Any, action: str) -> Any:
        """The admin request's result, or AdminFailed saying what the broker said."""
        try:
            return future.result(timeout=ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            self._refusals(error)
            self._refusals.check()
            said = f"{action} at {self.bootstrap_servers}: {error.str()}"
            raise AdminFailed(said, error.code()) from None


def ensure_topics(
    bootstrap_servers: str,
    source: str,
    target: str,
    dead_letter: str,
    kafka_config: Mapping[str, str] | None = None,
) -> None:
    """Create target (compacted) and dead-letter topics if missing; refuse a bad target.

    `kafka_config`: client settings with librdkafka's names (security). New topics get the
    source topic's partition count so output parallelism follows input.
    """
    admin = Admin(bootstrap_servers, kafka_config)
    existing = ensure_target(admin, source, target)
    if dead_letter not in existing:
        partitions = len(existing[source].partitions) if source in existing else 1
        _create(admin, dead_letter, partitions, {"cleanup.policy": "delete"})
    _wait_until_visible(admin, (target, dead_letter))


def ensure_target(admin: Admin, source: str, target: str) -> dict[str, Any]:
    """Create the compacted `target` with `source`'s partition count if missing, refuse it if
    not compacted; the topics that existed before."""
    existing = admin.topics()
    partitions = len(existing[source].partitions) if source in existing else 1
    if target in existing:
        _require_compacted(admin, target)
    else:
        _create(admin, target, partitions, {"cleanup.policy": "compact"})
    return existing


def _require_compacted(admin: Admin, topic: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.client.describe_configs([resource])[resource]
    configs = admin.result(described, f"describing topic {topic!r}")
    require_compacted(topic, configs["cleanup.policy"].value, "or choose another --target-topic")


def require_topic(
    bootstrap_servers: str, topic: str, kafka_config: Mapping[str, str], generator: str
) -> None:
    """TopicNotFound, saying how to fill it, unless `topic` exists."""
    if topic not in Admin(bootstrap_servers, kafka_config).topics():
        raise TopicNotFound(
            f"raw topic {topic!r} does not exist at {bootstrap_servers}: put events on it "
            f"first (sample ones: `globalstore {generator}`)"
        )


def ensure_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    kafka_config: Mapping[str, str] | None = None,
) -> None:
    """Create `topic` (plain delete policy: raw events age out) unless it exists."""
    admin = Admin(bootstrap_servers, kafka_config)
    if topic not in admin.topics():
        _create(admin, topic, partitions, {"cleanup.policy": "delete"})
        _wait_until_visible(admin, (topic,))


def _create(admin: Admin, topic: str, partitions: int, config: dict[str, str]) -> None:
    # replication_factor=-1: the cluster's default.replication.factor decides.
    new = NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=config)
    try:
        admin.result(admin.client.create_topics([new])[topic], f"creating topic {topic!r}")
    except AdminFailed as exc:  # another process may have created it in between
        if exc.code != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def _wait_until_visible(admin: Admin, topics: tuple[str, ...]) -> None:
    # A created topic reaches the broker's metadata a moment after create_topics returns;
    # callers (the job, a describe_configs) expect it to be there when this returns.
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while time.monotonic() < deadline:
        known = admin.topics()
        if all(topic in known and not known[topic].error for topic in topics):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {topics} did not appear within {ADMIN_TIMEOUT_S:.0f}s")
