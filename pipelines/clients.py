"""The librdkafka clients the pipelines make: the admin client, the sample-event producer.

Each gets the librdkafka side of the user's settings (Java-only names stripped), a logger,
so that librdkafka's own log lines go through Python logging (the `globalstore` command
shows them with -v) and never straight to the terminal, and an error callback that notices
the broker refusing the credentials (globalstore/kafka/clients.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from globalstore.kafka.clients import LIBRDKAFKA_LOG, Refusals
from pipelines.java_clients import librdkafka_settings


def client_config(refusals: Refusals, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A librdkafka client's configuration: `defaults`, the user's settings over them."""
    return {
        **(defaults or {}),
        **librdkafka_settings(refusals.kafka_config),
        "bootstrap.servers": refusals.bootstrap_servers,
        "logger": LIBRDKAFKA_LOG,
        "error_cb": refusals,
    }
