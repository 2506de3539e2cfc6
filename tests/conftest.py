"""Shared fixtures: one Kafka bootstrap address for the whole session, and unique topics.

Where the broker comes from, in order: GLOBALSTORE_TEST_BOOTSTRAP (an existing cluster);
a Kafka container through testcontainers when a Docker engine answers and the image can be
had; else the project's own local broker (globalstore.localkafka), started in a temporary
data directory. tests/kafka_source.py has the details.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_source import kafka_bootstrap_source


@pytest.fixture(scope="session")
def kafka_bootstrap(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[str]:
    def say(line: str) -> None:
        # Past the output capture, so the line shows whatever the run's verbosity.
        capture = pytestconfig.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            pytestconfig.pluginmanager.getplugin("terminalreporter").write_line(line)

    with kafka_bootstrap_source(tmp_path_factory.mktemp("kafka"), say) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


TopicFactory = Callable[..., str]


@pytest.fixture
def make_topic(kafka_admin: AdminClient, request: pytest.FixtureRequest) -> TopicFactory:
    """Create a uniquely named topic: make_topic(partitions=3, compact=True, config={...})."""

    def create(
        partitions: int = 1,
        compact: bool = True,
        config: dict[str, str] | None = None,
        prefix: str | None = None,
    ) -> str:
        base = prefix or request.node.name.split("[")[0].replace("test_", "")[:40]
        name = f"{base}-{uuid.uuid4().hex[:10]}"
        settings = {"cleanup.policy": "compact" if compact else "delete"}
        settings.update(config or {})
        futures = kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=settings)]
        )
        futures[name].result(timeout=30)
        wait_until_served(kafka_admin, name, partitions)
        return name

    return create


def wait_until_served(admin: AdminClient, topic: str, partitions: int) -> None:
    """Until the broker's metadata lists every partition with a leader: CreateTopics returns
    once the controller has the topic, and on a loaded machine a request right after it
    (DescribeConfigs, a produce) could still meet UNKNOWN_TOPIC_OR_PART."""
    deadline = time.monotonic() + 30
    while True:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        served = (
            found is not None
            and found.error is None
            and len(found.partitions) == partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        )
        if served:
            return
        assert time.monotonic() < deadline, f"topic {topic} not served after 30 s: {found}"
        time.sleep(0.05)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Mark what talks to a real broker (`-m integration`) and what runs Spark (`-m spark`),
    # so either can be selected or left out; the README's test command runs everything.
    for item in items:
        path = str(item.fspath)
        if os.sep + "integration" + os.sep in path or "kafka_bootstrap" in item.fixturenames:
            item.add_marker(pytest.mark.integration)
        if "kafka_bootstrap" in item.fixturenames:
            # What the container stage runs: the tests whose broker it replaces. Those that
            # start their own (a secured cluster, a SASL broker) prove nothing more there.
            item.add_marker(pytest.mark.session_broker)
        if os.sep + "pipelines" + os.sep in path:
            item.add_marker(pytest.mark.spark)
