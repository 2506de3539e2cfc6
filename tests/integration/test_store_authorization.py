"""Authorization is not an outage: a principal the broker denies something gets a clear,
immediate error naming the topic, the operation and the way on, not a start() timeout that
blames the network. Needs its own broker with SASL users and ACLs (tests/integration/
sasl_broker.py); the session broker of the other tests allows everything."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, NewTopic  # type: ignore[attr-defined]

from globalstore import AuthorizationError, FatalError, GlobalStore
from globalstore.follow.topic import end_offsets
from tests.integration.sasl_broker import SaslBroker, sasl_broker
from tests.integration.store_support import produce

# start() is given a long timeout; a denial must end it far sooner. The bound is generous
# for a loaded 2-core machine, and still a fraction of what a retry-until-timeout would take.
START_TIMEOUT = 60.0
FAST = 10.0
RECORDS = [("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3})]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    with sasl_broker(tmp_path_factory.mktemp("sasl") / "broker") as started:
        yield started


def _topic(broker: SaslBroker, *grants: AclOperation) -> str:
    """A compacted topic holding RECORDS, on which `reader` has exactly `grants`."""
    name = f"authz-{uuid.uuid4().hex[:10]}"
    config = {"cleanup.policy": "compact", "delete.retention.ms": "86400000"}
    broker.admin.create_topics([NewTopic(name, 2, 1, config=config)])[name].result(timeout=30)
    produce(broker.plain_bootstrap, name, RECORDS)
    if grants:
        broker.allow("reader", name, *grants)
    return name


def _start_denied(store: GlobalStore) -> AuthorizationError:
    began = time.monotonic()
    with pytest.raises(AuthorizationError) as info:
        store.start(timeout=START_TIMEOUT)
    elapsed = time.monotonic() - began
    assert elapsed < FAST, f"denial took {elapsed:.1f}s: retried as if the broker were down"
    assert isinstance(info.value, FatalError)
    return info.value


def test_reader_without_describe_configs_is_told_at_once(
    broker: SaslBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, AclOperation.READ, AclOperation.DESCRIBE)
    store = GlobalStore(
        topic, broker.sasl_bootstrap, tmp_path / "s", kafka_config=broker.client_config("reader")
    )
    message = str(_start_denied(store))
    assert repr(topic) in message
    assert "DescribeConfigs" in message
    assert "User:reader" in message
    assert "check_topic_config=False" in message  # the way to proceed
    assert "no Kafka broker answered" not in message


def test_reader_skipping_the_topic_config_check_restores_and_follows(
    broker: SaslBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = _topic(broker, AclOperation.READ, AclOperation.DESCRIBE)
    caplog.set_level(logging.WARNING, logger="globalstore")
    with GlobalStore(
        topic,
        broker.sasl_bootstrap,
        tmp_path / "s",
        kafka_config=broker.client_config("reader"),
        check_topic_config=False,
    ).start(timeout=START_TIMEOUT) as store:
        assert dict(store.items()) == dict(RECORDS)
        assert store.count() == 3
        produce(broker.plain_bootstrap, topic, [("a", None), ("d", {"n": 4})])
        assert store.wait_for(end_offsets(broker.plain_bootstrap, topic), timeout=30)
        assert dict(store.items()) == {"b": {"n": 2}, "c": {"n": 3}, "d": {"n": 4}}
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "check_topic_config=False" in r.getMessage()
    ]
    assert len(warnings) == 1, caplog.text
    assert "compact" in warnings[0] and "delete.retention.ms" in warnings[0]
    # reader has no ACL on any group: the store uses none, so it must not complain about one.
    assert "GROUP_AUTHORIZATION_FAILED" not in caplog.text


def test_reader_without_any_acl_is_told_at_once(broker: SaslBroker, tmp_path: Path) -> None:
    topic = _topic(broker)  # no ACL: the broker will not even describe the topic to reader
    store = GlobalStore(
        topic, broker.sasl_bootstrap, tmp_path / "s", kafka_config=broker.client_config("reader")
    )
    message = str(_start_denied(store))
    assert repr(topic) in message
    assert "Read" in message and "Describe" in message
    assert "User:reader" in message


def test_reader_without_read_is_told_at_once(broker: SaslBroker, tmp_path: Path) -> None:
    # DESCRIBE alone: metadata and offsets answer, the first fetch is refused.
    topic = _topic(broker, AclOperation.DESCRIBE)
    store = GlobalStore(
        topic,
        broker.sasl_bootstrap,
        tmp_path / "s",
        kafka_config=broker.client_config("reader"),
        check_topic_config=False,
    )
    message = str(_start_denied(store))
    assert repr(topic) in message
    assert "Read" in message
    assert "User:reader" in message
