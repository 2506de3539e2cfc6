"""The launcher's secured clusters, on real Kafka: a 3-node SASL_SSL cluster (shared by the
module: replication defaults, SCRAM logins, a leader killed and restarted) and a 1-node
mTLS broker (a client certificate from the cluster's CA gets in, one from another CA does
not). The mTLS test runs first and stops its broker before the cluster starts: one Kafka at
a time on a two-core machine."""

from __future__ import annotations

import signal
import stat
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from globalstore.cli import main
from globalstore.kafka.settings import read_properties
from globalstore.localkafka import LocalKafka
from tests.secured_cluster import secured_cluster
from tests.waiting import eventually

REFUSAL_DEADLINE_S = 30.0
_CERTIFICATE = ("ssl.certificate.location", "ssl.key.location")


def _admin(kafka: LocalKafka, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap, **kafka.client_config(user)})


def _create_topic(kafka: LocalKafka, partitions: int = 1) -> str:
    """A topic with the cluster's defaults (no replication factor given), served by leaders."""
    name = f"cluster-{uuid.uuid4().hex[:10]}"
    admin = _admin(kafka)
    admin.create_topics([NewTopic(name, partitions)])[name].result(timeout=60)

    def served() -> bool:
        found = admin.list_topics(name, timeout=10).topics[name]
        return len(found.partitions) == partitions and all(
            p.leader >= 0 for p in found.partitions.values()
        )

    eventually(served, 60, lambda: admin.list_topics(name, timeout=10).topics[name])
    return name


def _produce(kafka: LocalKafka, topic: str, values: list[bytes], user: str = "app") -> None:
    failed: list[str] = []
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "acks": "all", **kafka.client_config(user)}
    )
    for value in values:
        producer.produce(
            topic, value=value, on_delivery=lambda err, _: err and failed.append(str(err))
        )
    assert producer.flush(60) == 0
    assert failed == []


def _consume(
    kafka: LocalKafka, topic: str, expected: int, settings: Mapping[str, str]
) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            **settings,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                assert message.error() is None, message.error()
                seen.append(message.value())
    finally:
        consumer.close()
    return seen


def _refusals(bootstrap: str, settings: Mapping[str, str]) -> list[KafkaError]:
    """What librdkafka reports for a client with `settings` (a refusal is reported at the
    first connection), which must then get no metadata either."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "error_cb": errors.append})

    def reported() -> bool:
        producer.poll(0.1)
        return bool(errors)

    eventually(reported, REFUSAL_DEADLINE_S, lambda: errors)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=1)
    return errors


CERTIFICATE_CODES = (KafkaError._SSL, KafkaError._TRANSPORT)


def _says(errors: list[KafkaError], code: int, words: str) -> bool:
    return any(error.code() == code and words in error.str() for error in errors)


# -- mutual TLS (one node) -----------------------------------------------------------------


def test_mtls_admits_the_cluster_ca_certificates_only(tmp_path: Path) -> None:
    with secured_cluster(tmp_path / "mtls", nodes=1, security="mtls") as kafka:
        app = kafka.client_config("app")
        assert app["security.protocol"] == "SSL" and "sasl.password" not in app
        topic = _create_topic(kafka)
        _produce(kafka, topic, [b"over mtls"])
        assert _consume(kafka, topic, 1, app) == [b"over mtls"]

        untrusted = kafka.untrusted_client_config("app")
        assert untrusted["ssl.certificate.location"] != app["ssl.certificate.location"]
        refused = _refusals(kafka.bootstrap, untrusted)
        anonymous = {k: v for k, v in app.items() if k not in _CERTIFICATE}
        refused_too = _refusals(kafka.bootstrap, anonymous)
    # The broker ends the handshake with TLS alert 42; librdkafka calls that a transport
    # error (not _SSL, not _AUTHENTICATION), then all brokers down.
    for errors in (refused, refused_too):
        assert _says(errors, KafkaError._TRANSPORT, "alert bad certificate"), errors
        assert {e.code() for e in errors} <= {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


# -- the 3-node SASL_SSL cluster -----------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    with secured_cluster(tmp_path_factory.mktemp("cluster") / "kafka", nodes=3) as started:
        yield started


def test_three_nodes_answer_on_every_address(cluster: LocalKafka) -> None:
    addresses = cluster.bootstrap.split(",")
    assert len(addresses) == 3
    assert sorted(cluster.node_pids()) == [1, 2, 3]
    assert cluster.status().running and len(set(cluster.node_pids().values())) == 3
    for address in addresses:  # each node on its own, as the admin user
        alone = AdminClient({"bootstrap.servers": address, **cluster.client_config("admin")})
        assert sorted(alone.list_topics(timeout=30).brokers) == [1, 2, 3]


def test_new_topics_get_replication_factor_3_and_min_isr_2(cluster: LocalKafka) -> None:
    topic = _create_topic(cluster, partitions=3)
    admin = _admin(cluster)
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions.values()
    assert [len(p.replicas) for p in partitions] == [3, 3, 3]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2"


def test_app_produces_and_consumes_over_sasl_ssl(cluster: LocalKafka) -> None:
    app = cluster.client_config("app")
    assert app["security.protocol"] == "SASL_SSL" and app["sasl.username"] == "app"
    topic = _create_topic(cluster, partitions=2)
    sent = [f"v{i}".encode() for i in range(100)]
    _produce(cluster, topic, sent, user="app")
    assert sorted(_consume(cluster, topic, len(sent), app)) == sorted(sent)
    # The consumer group's offsets topic, created just now, is replicated like any other.
    offsets = _admin(cluster).list_topics("__consumer_offsets", timeout=30).topics
    assert {len(p.replicas) for p in offsets["__consumer_offsets"].partitions.values()} == {3}


def test_a_wrong_password_is_refused_as_authentication(cluster: LocalKafka) -> None:
    settings = {**cluster.client_config("app"), "sasl.password": "not-the-password"}
    began = time.monotonic()
    errors = _refusals(cluster.bootstrap, settings)
    assert time.monotonic() - began < REFUSAL_DEADLINE_S
    assert _says(errors, KafkaError._AUTHENTICATION, "invalid credentials"), errors
    assert not [e for e in errors if "not-the-password" in e.str()]


def test_a_broker_certificate_from_another_ca_is_refused(cluster: LocalKafka) -> None:
    errors = _refusals(cluster.bootstrap, cluster.untrusted_client_config("app"))
    # librdkafka reports the failed handshake as _SSL or, as often, as _TRANSPORT with the
    # same words (the store's Refusals reads both alike: kafka/clients.py).
    refused = [_says(errors, code, "certificate verify failed") for code in CERTIFICATE_CODES]
    assert any(refused), errors


def test_a_killed_leader_hands_over_and_comes_back(cluster: LocalKafka) -> None:
    topic = _create_topic(cluster)
    _produce(cluster, topic, [b"before"])
    leader = cluster.leader_of(topic, 0)
    cluster.stop_node(leader, signal_number=signal.SIGKILL)
    assert leader not in cluster.node_pids()

    # The controller fences the dead node once its session lapses, and elects another.
    eventually(lambda: cluster.leader_of(topic, 0) not in (leader, -1), 60, lambda: leader)
    _produce(cluster, topic, [b"during"])  # acks=all: the two left satisfy min ISR 2

    cluster.start_node(leader)
    assert leader in cluster.node_pids()
    admin = _admin(cluster)

    def back_in_sync() -> bool:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        return leader in partition.isrs

    eventually(back_in_sync, 90, lambda: admin.list_topics(topic, timeout=10).topics[topic])
    _produce(cluster, topic, [b"after"])
    seen = _consume(cluster, topic, 3, cluster.client_config("app"))
    assert seen == [b"before", b"during", b"after"]


def test_cli_writes_the_client_settings_of_a_running_cluster_and_no_password(
    cluster: LocalKafka, tmp_path: Path
) -> None:
    """`kafka start` on the running cluster's data dir finds it (its shape is recorded), and
    writes the app user's settings where told, or beside the data."""
    where = ["--data-dir", str(cluster.data_dir), "--port", str(cluster.port)]
    chosen = tmp_path / "app.properties"
    started = _kafka("start", *where, "--client-config-file", str(chosen))
    default = _kafka("start", *where)
    app = cluster.client_config("app")
    for result, written in ((started, chosen), (default, cluster.data_dir / "client.properties")):
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == cluster.bootstrap
        assert "already running" in result.stderr
        assert f"client settings: {written} (use --kafka-config-file {written})" in result.stderr
        assert app["sasl.password"] not in result.output
        assert read_properties(written) == app
        assert stat.S_IMODE(written.stat().st_mode) == 0o600

    status = _kafka("status", *where)
    assert status.exit_code == 0 and "running (3 of 3 nodes" in status.stdout
    assert "3-node sasl_ssl" in status.stdout
    logs = _kafka("logs", *where, "--node", "2", "-n", "3")
    assert logs.exit_code == 0 and 0 < len(logs.stdout.splitlines()) <= 3


def _kafka(*args: str) -> Result:
    return CliRunner().invoke(main, ["kafka", *args])
