"""Proof that the broker the fixture gives is a real Kafka, and that the launcher behaves."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from globalstore.localkafka import ANY_PORT, BrokerExitedError, LocalKafka
from globalstore.localkafka import broker as broker_module
from tests.conftest import TopicFactory


def _consume_all(bootstrap: str, topic: str, expected: int, **settings: str) -> list[tuple]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple] = []
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=500, timeout=0.5):
                assert message.error() is None, message.error()
                seen.append((message.key(), message.value()))
            if len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_produce_and_consume(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=3, compact=False)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    sent = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(300)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    assert sorted(_consume_all(kafka_bootstrap, topic, len(sent))) == sorted(sent)


def test_compacted_topic_config_reads_back(
    kafka_admin: AdminClient, make_topic: TopicFactory
) -> None:
    topic = make_topic(compact=True, config={"delete.retention.ms": "60000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = kafka_admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["delete.retention.ms"].value == "60000"


def test_transactions_commit_and_abort(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=2, compact=False)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"aborted", value=b"never seen")
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=f"c{i}".encode(), value=b"committed")
    producer.commit_transaction(30)

    seen = _consume_all(kafka_bootstrap, topic, 10, **{"isolation.level": "read_committed"})
    assert sorted(key for key, _ in seen) == sorted(f"c{i}".encode() for i in range(10))


@pytest.fixture
def own_broker(tmp_path: Path):
    broker = LocalKafka(port=ANY_PORT, data_dir=tmp_path / "broker", heap="512m")
    yield broker
    broker.stop(timeout=10)


def test_restarted_broker_keeps_topics_and_records(own_broker: LocalKafka) -> None:
    bootstrap = own_broker.start()
    first_pid = own_broker.status().pid
    assert own_broker.start() == bootstrap  # idempotent: no second JVM
    assert own_broker.status().pid == first_pid

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic("survivor", num_partitions=1, replication_factor=1)])
    created["survivor"].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(50):
        producer.produce("survivor", key=str(i).encode(), value=b"x")
    assert producer.flush(30) == 0

    assert own_broker.stop(timeout=20)
    assert not own_broker.status().running
    own_broker.start()
    assert own_broker.status().pid != first_pid
    assert len(_consume_all(bootstrap, "survivor", 50)) == 50


def test_any_port_broker_retries_when_its_port_is_taken_before_it_binds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: a port is free when picked and taken before the JVM binds it. Here the first
    pick is a port this test listens on, and the pre-launch check is skipped (as if the port
    was taken just after it): the JVM fails to bind and exits, start() picks new ports."""
    real_free_port = broker_module.free_port
    picks: list[int] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(
            broker_module,
            "free_port",
            lambda: (
                picks.append(real_free_port() if picks else taken.getsockname()[1]) or picks[-1]
            ),
        )
        monkeypatch.setattr(broker_module.LocalKafka, "_check_ports", lambda self: None)
        broker = LocalKafka(port=ANY_PORT, data_dir=tmp_path / "broker", heap="384m")
        try:
            bootstrap = broker.start(timeout=120)
            assert len(picks) == 2, picks
            assert bootstrap == f"127.0.0.1:{picks[1]}" == broker.bootstrap
            assert broker_module.lost_port_race(_all_logs(tmp_path / "broker" / "logs"))
            assert AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers
            broker.stop(timeout=20)
            assert broker.start(timeout=120) == bootstrap  # a restart keeps the port it got
        finally:
            broker.stop(timeout=10)


def _all_logs(directory: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(directory.glob("*.log")))


def test_broker_that_dies_during_start_shows_its_log(own_broker: LocalKafka) -> None:
    own_broker.start()
    own_broker.stop(timeout=20)
    # The data directory was formatted for node 1: a broker told it is node 2 refuses to run.
    voters = f"2@127.0.0.1:{own_broker.controller_port}"
    own_broker.extra_config = {"node.id": "2", "controller.quorum.voters": voters}
    with pytest.raises(BrokerExitedError, match="exited with code") as raised:
        own_broker.start(timeout=60)
    assert "Stored node id 1" in str(raised.value)  # the log tail says why
    assert not own_broker.status().running
