"""What every librdkafka client of the project shares, the store's and the pipelines':

- `create_client`: a client, or a one-line ConfigurationError naming the setting librdkafka
  refused (it checks names and values when the client is created, before any I/O);
- `Refusals`: an error callback that notices the broker refusing the credentials or a
  certificate. librdkafka retries those like an outage, so without it a wrong password
  shows only as a call that waits out its timeout, blamed on the network;
- `unauthenticated`: the AuthenticationError for it, in one line that names the mechanism
  and the user, never a secret;
- `StoreConsumer`: the calls a store makes on its consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from globalstore.errors import AuthenticationError, ConfigurationError
from globalstore.kafka.settings import mask_text

__all__ = ["LIBRDKAFKA_LOG", "Refusals", "StoreConsumer", "create_client", "unauthenticated"]

# librdkafka's own log lines (connection failures and the like, which the clients retry and
# the store reports through status()) go to Python logging under this name, never raw to
# the terminal; the `globalstore` command shows them with -v.
LIBRDKAFKA_LOG = logging.getLogger("globalstore.librdkafka")

# What librdkafka reports when the broker refuses the client's credentials (SASL) or either
# side refuses the other's certificate (TLS): no amount of retrying cures these.
_REFUSALS = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
)
# A broker that refuses the client's certificate (mTLS) ends the handshake with a TLS alert,
# which librdkafka reports as a plain transport error: "ssl/tls alert bad certificate: SSL
# alert number 42", "certificate verify failed". A broker restarting says neither.
_REFUSED_IN_TRANSPORT = ("alert bad certificate", "certificate verify failed", "SSL alert number")

_Client = TypeVar("_Client")


class StoreConsumer(Protocol):
    """The calls a store makes on its assign-only consumer: confluent_kafka.Consumer, or a
    fake in unit tests."""

    def poll(self, timeout: float = -1) -> Message | None:
        """One message or event, None if none came within `timeout` seconds (-1: no limit)."""

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to `num_messages` messages or events, those that came within `timeout` seconds (-1: no
        limit)."""

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Read exactly these partitions, each from its offset."""

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Read these partitions too, each from its offset."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The cluster's metadata (of `topic` alone if given)."""

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        """(low, high) offsets of `partition`; `cached` takes the last ones fetched rather than
        asking the broker."""

    def close(self) -> object:
        """Leave the broker and free the consumer."""


def create_client(
    factory: Callable[[dict[str, Any]], _Client], config: dict[str, Any], role: str
) -> _Client:
    """The client `factory` makes of `config`, or ConfigurationError naming what librdkafka
    refused (an unknown name, a bad value), secrets masked."""
    try:
        return factory(config)
    except (KafkaException, ValueError, TypeError) as exc:
        refusal = mask_text(str(exc), config)
        raise ConfigurationError(f"the Kafka {role} refused its settings: {refusal}") from None


class Refusals:
    """An error callback (librdkafka's error_cb) that keeps the broker's latest refusal of
    the credentials or a certificate, so `check()` can say why no broker answered."""

    def __init__(self, bootstrap_servers: str, kafka_config: Mapping[str, Any]) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.kafka_config = kafka_config
        self.failure: str | None = None  # librdkafka's words, the latest

    def __call__(self, error: KafkaError) -> None:
        """Keep `error`'s text if it is the broker's refusal of the credentials or a certificate."""
        if error.code() in _REFUSALS or _certificate_refused(error):
            self.failure = error.str()

    def check(self) -> None:
        """AuthenticationError if the broker refused the credentials (or a certificate)."""
        if self.failure is not None:
            raise unauthenticated(self.bootstrap_servers, self.kafka_config, self.failure)


def _certificate_refused(error: KafkaError) -> bool:
    said = error.str()
    return error.code() == KafkaError._TRANSPORT and any(m in said for m in _REFUSED_IN_TRANSPORT)


def unauthenticated(
    bootstrap_servers: str, kafka_config: Mapping[str, Any], reason: str
) -> AuthenticationError:
    """The broker refused who the client says it is (or a certificate did not match)."""
    protocol = str(kafka_config.get("security.protocol", "plaintext")).upper()
    if "SASL" in protocol:
        mechanism = kafka_config.get("sasl.mechanism", kafka_config.get("sasl.mechanisms"))
        who = f"SASL {mechanism or 'GSSAPI'} as user {kafka_config.get('sasl.username')!r}"
    else:
        who = "TLS certificates"
    said = mask_text(" ".join(reason.split()), kafka_config)
    return AuthenticationError(
        f"authentication failed at {bootstrap_servers} ({who} over {protocol}): {said}; "
        "check the credentials and certificates in the Kafka client settings"
    )
