"""Telling a missing ACL from an outage, and the way on when DescribeConfigs is missing.
The proof against a real broker with ACLs is tests/integration/test_store_authorization.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from globalstore import AuthorizationError, BrokerUnavailable, FatalError, StoreConfig
from globalstore.follow.topic import TopicInfo, check_compaction, denied


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), True),
        (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), True),
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), False),
        (KafkaException(KafkaError(KafkaError._TIMED_OUT)), False),
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), False),
        (KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), False),  # the store uses no group
        (TimeoutError(), False),
        (None, False),
    ],
)
def test_denied_is_a_missing_topic_acl_only(error: object, expected: bool) -> None:
    assert denied(error) is expected


def test_authorization_error_is_fatal_and_names_who_what_and_the_way_on() -> None:
    err = AuthorizationError("orders", "DescribeConfigs", "reader", "denied", "Do this.")
    assert isinstance(err, FatalError) and not isinstance(err, BrokerUnavailable)
    assert str(err) == (
        "the broker denied User:reader DescribeConfigs on topic 'orders' (denied). Do this."
    )
    anonymous = AuthorizationError("orders", "Read", None, "denied", "Do this.")
    assert "the store's principal Read on topic 'orders'" in str(anonymous)


def test_unchecked_topic_config_warns_instead_of_refusing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = StoreConfig(topic="t", bootstrap_servers="h:1", path=Path("p"))
    assert config.check_topic_config is True  # checked unless asked otherwise
    info = TopicInfo((0,), None, None, None, configs_checked=False)
    caplog.set_level(logging.WARNING)
    check_compaction(info, config)  # allow_uncompacted is False, yet no TopicNotCompacted
    assert "check_topic_config=False" in caplog.text
    assert "delete.retention.ms" in caplog.text
