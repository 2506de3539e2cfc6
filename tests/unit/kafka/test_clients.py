"""What every librdkafka client shares: a refused setting, refused credentials or a
refused certificate are each one line, and never show a secret (no broker: errors faked)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from globalstore.errors import AuthenticationError, ConfigurationError
from globalstore.kafka.clients import Refusals, create_client, unauthenticated
from tests.scram_settings import AUTH_MESSAGE, SECRET, SETTINGS


def one_line(error: Exception) -> str:
    text = str(error)
    assert "\n" not in text and SECRET not in text
    return text


def test_librdkafka_refusing_the_password_fails_at_once_in_one_line() -> None:
    refusals = Refusals("b:9093", SETTINGS)
    refusals(KafkaError(KafkaError._TRANSPORT, "connection refused"))
    refusals.check()  # a network error is not a refusal: the caller keeps waiting
    said = f"sasl_ssl://b:9093/1: SASL authentication error: {AUTH_MESSAGE} (password {SECRET})"
    refusals(KafkaError(KafkaError._AUTHENTICATION, said))
    with pytest.raises(AuthenticationError) as info:
        refusals.check()
    assert "authentication failed at b:9093" in one_line(info.value)


def test_a_broker_refusing_the_client_certificate_is_a_refusal_not_an_outage() -> None:
    refusals = Refusals("b:9093", {"security.protocol": "SSL"})
    refusals(KafkaError(KafkaError._TRANSPORT, "ssl://b:9093/1: Disconnected (after 0ms)"))
    refusals.check()  # a broker going away is an outage: keep waiting
    alert = (
        "ssl://b:9093/1: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad "
        "certificate: SSL alert number 42 (in state APIVERSION_QUERY)"
    )
    refusals(KafkaError(KafkaError._TRANSPORT, alert))
    with pytest.raises(AuthenticationError, match="TLS certificates over SSL"):
        refusals.check()


def test_tls_only_refusals_name_the_certificates() -> None:
    error = unauthenticated("b:9093", {"security.protocol": "SSL"}, "certificate verify failed")
    assert str(error).startswith("authentication failed at b:9093 (TLS certificates over SSL)")


def test_a_client_refusing_its_settings_is_one_line_without_the_secret() -> None:
    def refuse(config: dict[str, Any]) -> None:
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"bad {config['sasl.password']}"))

    with pytest.raises(ConfigurationError) as info:
        create_client(refuse, dict(SETTINGS), "client")
    assert "the Kafka client refused its settings" in one_line(info.value)
