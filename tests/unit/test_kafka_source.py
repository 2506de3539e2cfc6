"""The settings the suite hands a Kafka container, in the apache/kafka image's convention."""

from __future__ import annotations

from tests.kafka_source import container_environment


def test_settings_become_kafka_variables_with_the_client_port_advertised_on_loopback() -> None:
    env = container_environment(40123)
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://127.0.0.1:40123"
    assert env["KAFKA_LISTENERS"].startswith("PLAINTEXT://0.0.0.0:40123,")
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_LOG_DIRS"] == "/tmp/kafka-logs"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert env["KAFKA_HEAP_OPTS"].startswith("-Xm")  # a JVM option, not a setting
    assert len(env["CLUSTER_ID"]) == 22  # a Kafka cluster id: 16 bytes in base64
